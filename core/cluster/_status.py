"""`hookchat status`: the cluster's members, who owns which partition, and how many messages wait."""

from __future__ import annotations

import time
from typing import Any

import nats.js.errors

from core.cluster._bus import Bus
from core.config import ClusterConfig

__all__ = ["cluster_status", "render_status"]


async def cluster_status(config: ClusterConfig) -> dict[str, Any]:
    """What `hookchat status` shows, as data: `gateways` and `workers` (as they registered), `partitions`
    (`partition`, `owner`, `pending`: not yet delivered, `in_flight`: delivered and not acknowledged), `lag`
    (messages waiting in all) and `replies_pending` (replies not yet sent by their gateway)."""
    bus = Bus(config, "status")
    await bus.connect()
    try:
        gateways = await bus.members_of("gateway")
        workers = await bus.members_of("worker")
        owners = {int(e.key[1:]): e.value.decode() for e in await bus.entries("leases")}
        partitions = []
        for p in range(config.partitions):
            info = await bus.js.consumer_info(bus.in_stream, f"part-{p}")
            partitions.append(
                {"partition": p, "owner": owners.get(p), "pending": info.num_pending, "in_flight": info.num_ack_pending}
            )
        replies = 0
        for gateway in gateways:
            try:
                replies += (await bus.js.consumer_info(bus.out_stream, f"gw-{gateway['name']}")).num_pending
            except nats.js.errors.NotFoundError:
                continue
        return {
            "url": config.url,
            "gateways": gateways,
            "workers": workers,
            "partitions": partitions,
            "lag": sum(p["pending"] + p["in_flight"] for p in partitions),
            "replies_pending": replies,
        }
    finally:
        await bus.close()


def render_status(status: dict[str, Any]) -> str:
    """`cluster_status` as the terminal shows it."""
    now = time.time()
    lines = [
        f"cluster on {status['url']}: {len(status['gateways'])} gateway(s), {len(status['workers'])} "
        f"worker(s), lag {status['lag']} message(s), {status['replies_pending']} reply(ies) unsent"
    ]
    for g in status["gateways"]:
        lines.append(
            f"  gateway {g['name']} pid {g['pid']}  adapters {', '.join(g['adapters']) or '-'}  "
            f"received {g['received']}  replied {g['replied']}  seen {now - g['seen']:.1f}s ago"
        )
    owned: dict[str | None, list[dict[str, Any]]] = {}
    for p in status["partitions"]:
        owned.setdefault(p["owner"], []).append(p)
    for w in status["workers"]:
        mine = owned.get(w["name"], [])
        lag = sum(p["pending"] + p["in_flight"] for p in mine)
        lines.append(
            f"  worker {w['name']} pid {w['pid']}  partitions {len(mine)}  lag {lag}  "
            f"messages {w['turns']}  seen {now - w['seen']:.1f}s ago"
        )
    orphans = owned.get(None, [])
    if orphans:
        lag = sum(p["pending"] + p["in_flight"] for p in orphans)
        lines.append(f"  no owner: {len(orphans)} partition(s), lag {lag}")
    busy = [p for p in status["partitions"] if p["pending"] or p["in_flight"]]
    if busy:
        lines.append(
            "  partitions with messages waiting: "
            + ", ".join(
                f"{p['partition']}({p['pending']}+{p['in_flight']}, {p['owner'] or 'no owner'})" for p in busy[:20]
            )
            + (" ..." if len(busy) > 20 else "")
        )
    return "\n".join(lines)

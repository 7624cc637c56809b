"""One process's connection to the cluster: the NATS server, the JetStream streams and key-value buckets named by
`[cluster]`, and how sessions map to partitions."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import os
import re
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api
from nats.js.kv import KeyValue

from core.cluster._publish import Publisher, subscribe_direct
from core.config import ClusterConfig
from core.utils.log import logger
from core.utils.text import json_encoder

__all__ = [
    "Entry",
    "Bus",
    "StandingPull",
    "ClusterError",
    "partition_of",
    "encode_key",
    "decode_key",
    "default_name",
    "delivery_of",
    "NATS_ERRORS",
    "to_json",
]

_encode_tree = json_encoder()


def to_json(value: object) -> str:
    """`json.dumps(value, ensure_ascii=False)` for the cluster's own values, trees of dicts, lists and scalars, from
    an encoder made once (`json_encoder`): a worker's turn encodes four of them (its reply, its stored turn, its
    answered ids, the history value's head), a gateway's message one. A value that contains itself raises
    `RecursionError` (`ValueError` from `json.dumps`, which a plugin's store values go through)."""
    if isinstance(value, str):
        return json.encoder.encode_basestring(value)
    return _encode_tree(value)


#: What a NATS call raises when the server is away or refuses (callers retry or report, never crash a loop).
NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError, OSError)


# A JetStream message's reply subject: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<left>
_ACK_SUBJECT = re.compile(r"\$JS\.ACK\.[^.]+\.[^.]+\.(\d+)\.\d+\.(\d+)\.\d+\.\d+")


def delivery_of(msg: Msg) -> tuple[int, int]:
    """How many times a JetStream message was delivered, and its consumer sequence, read from its reply subject
    (nats-py's `msg.metadata` builds three dataclasses and a datetime for them); other subject forms (with a
    domain) through `msg.metadata`."""
    found = _ACK_SUBJECT.fullmatch(msg.reply)
    if found is None:
        metadata = msg.metadata
        return metadata.num_delivered, metadata.sequence.consumer
    return int(found[1]), int(found[2])


class Entry(NamedTuple):
    """One live key of a bucket, as `Bus.entries` lists it."""

    key: str
    value: bytes
    revision: int


_FIRST_CONNECT = 10.0
_REQUEST_TIMEOUT = 5.0  # seconds a JetStream call waits for its answer unless told otherwise


class ClusterError(RuntimeError):
    """The cluster cannot be reached or set up: the message names the NATS server and what failed."""


@functools.lru_cache(maxsize=65_536)  # asked several times per message: a hash each time showed in profiles
def partition_of(sid: str, partitions: int) -> int:
    """The partition of session `sid`: a stable hash of its id, the same in every process and release."""
    return int.from_bytes(hashlib.blake2b(sid.encode(), digest_size=8).digest(), "big") % partitions


@functools.lru_cache(maxsize=65_536)  # a session's keys, asked for five times a turn
def encode_key(text: str) -> str:
    """`text` as a key-value key (which allows only letters, digits, `-`, `_`, `=`, `.`, `/`): URL-safe base64."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=") or "="


def decode_key(key: str) -> str:
    """The text `encode_key` encoded."""
    if key == "=":
        return ""
    return base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)).decode()


def default_name(role: str) -> str:
    """A process's name when `[cluster] name` is unset: role, host and process id."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())[:40]
    return f"{role}-{host}-{os.getpid()}"


class Bus:
    """The streams and buckets of one cluster (all names start with `[cluster] prefix`):

    - stream `<PREFIX>_IN`, subjects `<prefix>.in.<partition>`: incoming messages, one durable consumer per
      partition (`part-<n>`, at most one message unacknowledged), removed once acknowledged;
    - stream `<PREFIX>_OUT`, subjects `<prefix>.out.<gateway>`: replies, one durable consumer per gateway;
    - buckets `<prefix>_history` (a session's turns), `<prefix>_buffers` (messages buffered for a later turn),
      `<prefix>_stores` (plugins' `self.store`), `<prefix>_members` (gateways and workers, expiring) and
      `<prefix>_leases` (which worker owns which partition, expiring).
    """

    def __init__(self, config: ClusterConfig, name: str) -> None:
        self.config = config
        self.name = name
        self.prefix = config.prefix
        self.in_stream = f"{config.prefix.upper()}_IN"
        self.out_stream = f"{config.prefix.upper()}_OUT"
        self.nc: Any = None
        self.js: Any = None
        self._publisher: Publisher | None = None
        self.history: KeyValue | None = None
        self.buffers: KeyValue | None = None
        self.stores: KeyValue | None = None
        self.members: KeyValue | None = None
        self.leases: KeyValue | None = None
        self._closing = False
        #: Called with False when the connection to the server drops and True when it is back.
        self.on_connection: Callable[[bool], None] | None = None

    def in_subject(self, partition: int) -> str:
        """Where messages of `partition` are published."""
        return f"{self.prefix}.in.{partition}"

    def out_subject(self, gateway: str) -> str:
        """Where replies for `gateway` are published."""
        return f"{self.prefix}.out.{gateway}"

    def partition_of_subject(self, subject: str) -> int | None:
        """The partition an incoming message's subject names (None for another subject)."""
        head, _, number = subject.rpartition(".")
        return int(number) if head == f"{self.prefix}.in" and number.isdigit() else None

    def partition(self, sid: str) -> int:
        """The partition of session `sid`."""
        return partition_of(sid, self.config.partitions)

    @property
    def can_reset(self) -> bool:
        """Whether the server resets consumers (JetStream's consumer reset, ADR-60: nats-server 2.14 or later)."""
        try:
            version = self.nc.connected_server_version
            return (version.major, version.minor) >= (2, 14)
        except (AttributeError, ValueError):  # not connected, or a version that is not semantic
            return False

    async def connect(self) -> None:
        """Connect (reconnecting for ever once connected) and create what is missing; `ClusterError` when the
        server cannot be reached."""

        async def disconnected() -> None:
            if not self._closing:
                logger.warning("cluster: %s lost the NATS server %s; reconnecting", self.name, self.config.url)
                if self.on_connection is not None:
                    self.on_connection(False)

        async def reconnected() -> None:
            logger.warning("cluster: %s reconnected to the NATS server", self.name)
            if self.on_connection is not None:
                self.on_connection(True)

        async def error(exc: Exception) -> None:
            logger.debug("cluster: NATS client error: %s", str(exc) or type(exc).__name__)

        try:  # the client retries for ever (a server restarting is waited for); the first connection gets 10 s
            self.nc = await asyncio.wait_for(
                nats.connect(
                    self.config.url,
                    name=self.name,
                    connect_timeout=2,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.25,
                    allow_reconnect=True,
                    disconnected_cb=disconnected,
                    reconnected_cb=reconnected,
                    error_cb=error,
                ),
                _FIRST_CONNECT,
            )
        except NATS_ERRORS as exc:
            raise ClusterError(
                f"cannot reach the NATS server at {self.config.url} ([cluster] url) within "
                f"{_FIRST_CONNECT:.0f} s: {str(exc) or type(exc).__name__}"
            ) from exc
        self.js = self.nc.jetstream(timeout=_REQUEST_TIMEOUT)
        try:
            self._publisher = Publisher(self.nc, _REQUEST_TIMEOUT)
            await self._publisher.start()
            await self._ensure()
        except NATS_ERRORS as exc:
            await self.close()
            raise ClusterError(
                f"cannot set up JetStream on {self.config.url} (is it started with -js?): {exc}"
            ) from exc

    async def _ensure(self) -> None:
        cfg = self.config
        await self._stream(
            api.StreamConfig(
                name=self.in_stream,
                subjects=[f"{self.prefix}.in.*"],
                retention=api.RetentionPolicy.WORK_QUEUE,
                storage=api.StorageType.FILE,
                duplicate_window=cfg.dedup_window,
            )
        )
        await self._stream(
            api.StreamConfig(
                name=self.out_stream,
                subjects=[f"{self.prefix}.out.*"],
                retention=api.RetentionPolicy.WORK_QUEUE,
                storage=api.StorageType.FILE,
                duplicate_window=cfg.dedup_window,
            )
        )
        self.history = await self._bucket("history")
        self.buffers = await self._bucket("buffers")
        self.stores = await self._bucket("stores")
        self.members = await self._bucket("members", ttl=cfg.lease_seconds)
        self.leases = await self._bucket("leases", ttl=cfg.lease_seconds)
        for partition in range(cfg.partitions):
            await self.js.add_consumer(
                self.in_stream,
                api.ConsumerConfig(
                    durable_name=f"part-{partition}",
                    filter_subject=self.in_subject(partition),
                    ack_policy=api.AckPolicy.EXPLICIT,
                    ack_wait=cfg.ack_wait,
                    max_ack_pending=1,
                    deliver_policy=api.DeliverPolicy.ALL,
                ),
            )

    async def _stream(self, config: api.StreamConfig) -> None:
        try:
            await self.js.stream_info(config.name)
        except nats.js.errors.NotFoundError:
            await self.js.add_stream(config)

    async def _bucket(self, kind: str, ttl: float | None = None) -> KeyValue:
        bucket = f"{self.prefix}_{kind}"
        try:
            return await self.js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            return await self.js.create_key_value(bucket=bucket, history=1, ttl=ttl, storage=api.StorageType.FILE)

    async def entries(self, kind: str, pattern: str = ">") -> list[Entry]:
        """The live entries of bucket `<prefix>_<kind>` whose keys match `pattern` (`*` one token, `>` the rest).

        Read through a short-lived pull consumer of the bucket's stream: it knows exactly how many entries are
        left before the first is fetched. (The client's key watcher can report "no more" before the entries it
        was already sent are processed, which would hide parked messages from a partition's new owner.)"""
        bucket = f"{self.prefix}_{kind}"
        prefix = f"$KV.{bucket}."
        sub = await self.js.pull_subscribe(
            prefix + pattern,
            stream=f"KV_{bucket}",
            config=api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
                ack_policy=api.AckPolicy.NONE,
                inactive_threshold=10.0,
                mem_storage=True,
            ),
        )
        found: list[Entry] = []
        try:
            remaining = (await sub.consumer_info()).num_pending
            while remaining > 0:
                for msg in await sub.fetch(min(remaining, 512), timeout=5):
                    remaining = msg.metadata.num_pending
                    headers = msg.headers or {}
                    if msg.data and "KV-Operation" not in headers and "Nats-Marker-Reason" not in headers:
                        found.append(Entry(msg.subject[len(prefix) :], msg.data, msg.metadata.sequence.stream))
        finally:
            with contextlib.suppress(*NATS_ERRORS):
                await self.js.delete_consumer(f"KV_{bucket}", (await sub.consumer_info()).name)
            with contextlib.suppress(*NATS_ERRORS):
                await sub.unsubscribe()
        return found

    async def publish(
        self,
        subject: str,
        data: dict[str, Any] | bytes,
        msg_id: str,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,  # nats-py's publish bounds its own wait
    ) -> None:
        """Publish `data` (a dict is sent as JSON) to JetStream and wait, at most `timeout` seconds (default 5),
        for the stream to hold it; the stream drops a second message with the same `msg_id` within
        `[cluster] dedup_window`, so retrying after a lost answer never duplicates."""
        payload = data if isinstance(data, bytes) else to_json(data).encode()
        await self.publisher.publish(subject, payload, {"Nats-Msg-Id": msg_id, **(headers or {})}, timeout)

    async def write(self, kv: KeyValue, key: str, value: bytes | None, last: int) -> int:
        """Compare-and-set on bucket `kv`: store `value` under `key` (delete the key, for None) only if the key is
        at revision `last` (0: never set; a deletion with 0 is unconditional). The new revision (that of the
        deletion marker after a deletion); `KeyWrongLastSequenceError` when the key had moved on."""
        if value is None:
            headers = {"KV-Operation": "DEL"}
            if last:
                headers["Nats-Expected-Last-Subject-Sequence"] = str(last)
        else:
            headers = {"Nats-Expected-Last-Subject-Sequence": str(last)}
        return await self.publisher.publish(f"{kv._pre}{key}", value or b"", headers)

    async def put(self, kv: KeyValue, key: str, value: bytes) -> int:
        """Store `value` under `key` in bucket `kv`, whatever was there; its revision."""
        return await self.publisher.publish(f"{kv._pre}{key}", value)

    async def purge(self, kv: KeyValue, pattern: str) -> None:
        """Remove the keys matching `pattern` (`*` one token) from bucket `kv` with every trace of them (a deletion
        would leave a marker per key)."""
        await self.js.purge_stream(f"KV_{kv._name}", subject=f"{kv._pre}{pattern}")

    @property
    def publisher(self) -> Publisher:
        """The connection's JetStream publisher (`ClusterError` before `connect`)."""
        if self._publisher is None:
            raise ClusterError(f"{self.name} is not connected to the cluster")
        return self._publisher

    async def register(self, role: str, info: dict[str, Any]) -> None:
        """Announce this process in the members bucket (it expires `lease_seconds` after the last call)."""
        assert self.members is not None
        await self.members.put(f"{role}.{self.name}", json.dumps({"name": self.name, "role": role, **info}).encode())

    async def members_of(self, role: str) -> list[dict[str, Any]]:
        """The live members of `role` (those that registered within `lease_seconds`), by name."""
        assert self.members is not None
        found = [json.loads(e.value) for e in await self.entries("members", f"{role}.*")]
        return sorted(found, key=lambda m: m["name"])

    async def close(self) -> None:
        """Flush and close the connection."""
        nc, self.nc = self.nc, None
        self._closing = True
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(*NATS_ERRORS):
                await nc.flush(timeout=2)
            with contextlib.suppress(*NATS_ERRORS):  # nats-py raises when the server is away
                await nc.close()


class StandingPull:
    """One standing pull request on a durable pull consumer, instead of a request per message: the server holds it
    and delivers each message as the consumer lets one go (for a partition, once the one before is acknowledged),
    so a message costs no request of its own, and an idle consumer one request every `EXPIRES` seconds.

    The request is made again when the server says it expired or failed (a status message), after `BATCH`
    messages, after a reconnection (a server that restarted forgot it), when nothing has come for longer than it
    can live, and on `renew`. `end` removes the interest, so the server drops the request and delivers nothing
    more; `close` also returns what it had sent before that, for the caller to let go."""

    EXPIRES = 10.0  # seconds a request lives
    BATCH = 1_000  # messages a request asks for

    def __init__(self, nc: Any, subject: str) -> None:
        self._nc = nc
        self._subject = subject  # the consumer's `MSG.NEXT` API subject
        self._inbox = nc.new_inbox()
        self._arrived: deque[Msg] = deque()
        self._waiter: asyncio.Future[None] | None = None  # resolved when a message arrives, or by `_expire`
        self._deadline = 0.0  # when `_waiter` is woken if nothing came (the loop's time)
        self._timer: asyncio.TimerHandle | None = None
        self._sub: Any = None
        self._left = 0  # messages the newest request may still deliver
        self._made = 0.0  # when the newest request was made (monotonic)
        self._reconnects = 0  # the connection's reconnections when it was made
        self._ended: asyncio.Future[None] | None = None

    @classmethod
    async def open(cls, bus: Bus, consumer: str, stream: str | None = None) -> StandingPull:
        """A standing pull on `consumer` of `stream` (default: the incoming stream), its first request made."""
        pull = cls(bus.nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream or bus.in_stream}.{consumer}")
        pull._sub = await subscribe_direct(bus.nc, pull._inbox, pull._arrive)
        await pull.renew()
        return pull

    def _arrive(self, msg: Msg) -> None:
        self._arrived.append(msg)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _take(self, timeout: float) -> Msg | None:
        """The oldest message that arrived, waiting up to `timeout` seconds for one: a future (not `wait_for` on a
        queue, which makes a task per call), and one timer for the pull, not one per wait (`_expire`)."""
        if not self._arrived:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            self._deadline = loop.time() + timeout
            if self._timer is None or self._timer.when() > self._deadline:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = loop.call_at(self._deadline, self._expire)
            try:
                await waiter
            finally:
                self._waiter = None
            if not self._arrived:
                return None
        return self._arrived.popleft()

    def _expire(self) -> None:
        """The pull's timer: wake the wait whose deadline passed, or come back at its deadline. Left armed when a
        wait ends early (a busy partition waits a few milliseconds for each message, and making and cancelling a
        timer each time cost more than the rest of the wait), it stops when nothing waits."""
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        loop = waiter.get_loop()
        if loop.time() >= self._deadline:
            waiter.set_result(None)
        else:
            self._timer = loop.call_at(self._deadline, self._expire)

    async def renew(self) -> None:
        """Make the request (again)."""
        self._left, self._made, self._reconnects = self.BATCH, time.monotonic(), self._nc.stats["reconnects"]
        request = {"batch": self.BATCH, "expires": int(self.EXPIRES * 1e9)}
        await self._nc.publish(self._subject, json.dumps(request).encode(), reply=self._inbox)

    async def next(self, timeout: float) -> Msg | None:
        """The next message, or None when none came within `timeout` seconds."""
        while True:
            if self._nc.stats["reconnects"] != self._reconnects or time.monotonic() - self._made > self.EXPIRES + 2:
                await self.renew()  # the request may be lost (or nothing said it ended)
            msg = await self._take(timeout)
            if msg is None:
                return None
            status = (msg.headers or {}).get("Status")
            if status is None:
                self._left -= 1
                if self._left <= 0:
                    await self.renew()
                return msg
            if status == "408":  # expired: made again, unless it was an older request's (a newer one is out)
                if time.monotonic() - self._made >= self.EXPIRES - 1:
                    await self.renew()
            elif status != "100":  # refused (the server or its JetStream restarting): again after a pause
                await asyncio.sleep(0.25)
                await self.renew()

    async def end(self) -> None:
        """Remove the interest, so the server drops the request and sends nothing more (at once, even while a turn
        runs: its acknowledgement then frees the next message for the partition's next owner). Later calls wait for
        the first."""
        if self._ended is None:
            self._ended = asyncio.ensure_future(self._unsubscribe())
        await asyncio.shield(self._ended)

    async def _unsubscribe(self) -> None:
        try:
            await asyncio.wait_for(self._sub.drain(), 2.0)  # what the server sent before it dropped the request comes
        except (*NATS_ERRORS, ValueError):  # the server away: forget the interest here, so no reconnect renews it
            with contextlib.suppress(*NATS_ERRORS, ValueError):
                await self._sub.unsubscribe()

    async def close(self) -> list[Msg]:
        """`end`, then the messages that came and were not taken by `next`, for the caller to let go."""
        await self.end()
        left = [msg for msg in self._arrived if msg.headers is None or "Status" not in msg.headers]
        self._arrived.clear()
        return left

"""A worker's replies: which gateway holds each session's connection (`ReplyRouter.route`), the `RemoteAdapter`
stand-ins of the gateways' adapters, and the publish of each reply with its receipt awaited."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from nats.aio.msg import Msg

from core.adapter import ALL_ELEMENTS, Adapter
from core.chat import KiraEvent, KiraIMSentResult, KiraMessageBatchEvent, MessageChain, Session
from core.chat.wire import chain_to_wire, session_to_wire
from core.cluster._bus import NATS_ERRORS, Bus, to_json
from core.cluster._publish import subscribe_direct
from core.config import ClusterConfig

__all__ = ["AdapterTable", "RemoteAdapter", "ReplyRouter"]

_ROUTES_KEPT = 100_000  # sessions whose gateway a worker remembers
_PUBLISH_TRIES = 20  # the server may be restarting: the same reply id never publishes twice


class AdapterTable(Protocol):
    """What the router uses of the app: its adapters, to add a stand-in for each adapter a gateway serves."""

    @property
    def adapters(self) -> Mapping[str, Adapter]:
        """The app's adapters by name."""
        ...

    def add_adapter(self, adapter: Adapter) -> None:
        """Add an adapter to the app."""
        ...


class RemoteAdapter(Adapter):
    """On a worker, the stand-in for an adapter a gateway holds: `send` publishes the message to that gateway's
    reply subject and waits up to `[cluster] receipt_timeout` for the platform's receipt (0: not at all; the
    result is then `ok` once the stream holds the reply, with no message id).

    A turn's replies are numbered (a hash of its messages' ids, and the reply's index) and published with that id,
    so a turn redone after a worker died does not send again what it had sent."""

    drafts = False

    def __init__(self, name: str, router: ReplyRouter, capabilities: frozenset[str] = ALL_ELEMENTS) -> None:
        super().__init__(name)
        self.capabilities = capabilities
        self.router = router

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """A message outside any turn."""
        return await self.send_in_turn(session, chain, None)

    async def send_in_turn(self, session: Session, chain: MessageChain, event: KiraEvent | None) -> KiraIMSentResult:
        """Publish the reply to the gateway that holds the session's connection, and wait for its receipt."""
        reply_id = None
        if isinstance(event, KiraMessageBatchEvent):
            ids = [m.inbox_id for m in event.messages if m.inbox_id]
            if ids:
                batch = hashlib.blake2b("\0".join(ids).encode(), digest_size=12).hexdigest()
                reply_id = f"{batch}.{event.sends}"
        return await self.router.publish_reply(session, chain, reply_id)


class ReplyRouter:
    """Routes replies to gateways: a session's replies go to the gateway that delivered its last message; a push
    to a session not seen yet goes to a live gateway serving its adapter (`gateways`, refreshed each heartbeat).
    `owns(sid)` fences a turn that outlived this worker's lease: its replies are refused."""

    def __init__(self, bus: Bus, name: str, config: ClusterConfig, app: AdapterTable, owns: Callable[[str], bool]):
        self.bus = bus
        self.name = name
        self.config = config
        self.app = app
        self._owns = owns
        #: Live gateways by name (their registrations), refreshed each heartbeat.
        self.gateways: dict[str, dict[str, Any]] = {}
        self._routes: OrderedDict[str, str] = OrderedDict()  # session -> the gateway that delivered its last message
        self._receipts: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def start(self) -> None:
        """Subscribe to this worker's receipts (the subscription ends with the connection)."""
        await subscribe_direct(self.bus.nc, f"{self.bus.prefix}.receipt.{self.name}.*", self._on_receipt)

    def route(self, sid: str, gateway: str, adapter_name: str) -> None:
        """A message of `sid` came through `gateway`'s adapter `adapter_name`: replies go back the same way."""
        if gateway:
            self._routes[sid] = gateway
            self._routes.move_to_end(sid)
            if len(self._routes) > _ROUTES_KEPT:
                self._routes.popitem(last=False)
        if adapter_name not in self.app.adapters:
            info = self.gateways.get(gateway, {}).get("adapters", {}).get(adapter_name)
            capabilities = frozenset(info) if info is not None else ALL_ELEMENTS
            self.app.add_adapter(RemoteAdapter(adapter_name, self, capabilities))

    def _gateway_for(self, session: Session) -> str | None:
        gateway = self._routes.get(session.sid)
        if gateway is not None:
            return gateway
        for name, info in self.gateways.items():  # a push to a session this worker has not seen
            if session.adapter_name in info.get("adapters", {}):
                return name
        return None

    async def publish_reply(self, session: Session, chain: MessageChain, reply_id: str | None) -> KiraIMSentResult:
        """Send `chain` through the gateway holding `session`'s connection; see `RemoteAdapter`."""
        if reply_id is not None and not self._owns(session.sid):  # a turn that outlived this worker's lease
            return KiraIMSentResult(
                chain,
                session,
                ok=False,
                error="not sent: the session's partition moved to another worker, which answers it",
            )
        gateway = self._gateway_for(session)
        if gateway is None:
            return KiraIMSentResult(
                chain, session, ok=False, error=f"no gateway serves adapter {session.adapter_name!r}"
            )
        reply_id = reply_id or f"push-{_token()}"
        waiting = self.config.receipt_timeout > 0
        token = _token() if waiting else ""
        headers = {"Hookchat-Receipt": f"{self.bus.prefix}.receipt.{self.name}.{token}"} if waiting else None
        if waiting:
            self._receipts[token] = asyncio.get_running_loop().create_future()
        try:
            data = {"id": reply_id, "session": session_to_wire(session), "chain": chain_to_wire(chain)}
            payload = to_json(data).encode()  # once, not at every retry
            for attempt in range(_PUBLISH_TRIES):
                try:
                    await self.bus.publish(self.bus.out_subject(gateway), payload, reply_id, headers)
                    break
                except NATS_ERRORS as exc:
                    if attempt == _PUBLISH_TRIES - 1:
                        return KiraIMSentResult(chain, session, ok=False, error=f"cluster unreachable: {exc}")
                    await asyncio.sleep(0.25 * (attempt + 1))
            if not waiting:
                return KiraIMSentResult(chain, session, ok=True)
            try:
                receipt = await asyncio.wait_for(self._receipts[token], self.config.receipt_timeout)
            except TimeoutError:
                return KiraIMSentResult(chain, session, ok=True)  # queued for the gateway; its receipt is late
            return KiraIMSentResult(
                chain,
                session,
                ok=bool(receipt.get("ok")),
                message_id=str(receipt.get("message_id") or ""),
                error=receipt.get("error"),
            )
        finally:
            self._receipts.pop(token, None)

    def _on_receipt(self, msg: Msg) -> None:
        future = self._receipts.get(msg.subject.rsplit(".", 1)[-1])
        if future is not None and not future.done():
            with contextlib.suppress(ValueError):
                future.set_result(json.loads(msg.data))


def _token() -> str:
    return hashlib.blake2b(str((time.time_ns(), id(object()))).encode(), digest_size=9).hexdigest()

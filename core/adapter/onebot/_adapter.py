"""`OneBotAdapter`: QQ (and any OneBot v11 platform) through NapCat, Lagrange.OneBot, go-cqhttp and the like.

Frames are read as they come; events wait in one bounded queue and one task turns them into `KiraIMMessage`s for
the app, in arrival order. A full queue stops the reading (back-pressure); a message event that must be read anyway
(an action's answer has waited behind it for `READ_GRACE`) is refused, and its sender told (`busy_notice`) (naming each group from `get_group_info`, remembered for a while). Replies go out with
`send_msg`; a reply produced while its account is disconnected waits (bounded) for the reconnect, or is reported
as failed after `offline_send_timeout`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import ValidationError
from websockets.asyncio.connection import Connection as WebSocket
from websockets.asyncio.server import Server
from websockets.frames import CloseCode

from core.adapter import Adapter, AdapterError, AdapterHost, options_error
from core.adapter.onebot._accounts import Accounts
from core.adapter.onebot._connection import ActionFailed, Connection, NotConnected, OneBotError
from core.adapter.onebot._cqcode import to_cq
from core.adapter.onebot._events import (
    Frame,
    MessageEvent,
    NoticeEvent,
    group_of,
    mentions,
    message_of,
    notice_of,
    quoted_id,
)
from core.adapter.onebot._forward import dial_forever
from core.adapter.onebot._options import OneBotOptions
from core.adapter.onebot._reverse import serve_reverse
from core.adapter.onebot._segments import to_messages, to_segments
from core.chat.message_elements import MediaError, Poke, Text
from core.chat.message_utils import KiraIMMessage, KiraIMSentResult, MessageChain
from core.chat.session import Session
from core.utils.net import is_loopback_host
from core.utils.recent import Recent
from core.utils.tasks import cancel_and_wait

__all__ = ["OneBotAdapter", "OneBotStats", "CAPABILITIES"]

logger = logging.getLogger("hookchat.adapter.onebot")

#: What the adapter can send, and so which built-in tags the model is offered.
CAPABILITIES = frozenset(
    {"text", "at", "reply", "image", "sticker", "record", "video", "emoji", "file", "forward", "json", "poke"}
)

_OWN_IDS = 1000  # message ids the bot sent, per adapter, to tell a reply to the bot without asking the platform
_GROUP_NAMES = 1000  # group names remembered, per adapter
_GROUP_NAME_TTL = 3600.0  # seconds before a group's name is asked again (groups get renamed)
_REFUSED_SHOWN = 10  # refused messages a notice quotes; it counts the rest
_GROUP_NAME_RETRY = 60.0  # seconds before asking again after get_group_info failed or timed out


@dataclass(frozen=True)
class OneBotStats:
    """The adapter's state by size, for operators and tests: every figure here is bounded by an option."""

    accounts: dict[str, bool]
    connections_made: int
    events_processed: int
    queued_events: int
    queued_bytes: int
    #: Events refused because the queue was full while an action's answer had to be read (senders told).
    dropped_events: int
    #: Times reading stopped because the queue was full (the implementation was held back).
    pauses: int
    malformed_frames: int
    pending_actions: int
    waiting_sends: int
    routes: int
    own_message_ids: int
    group_names: int
    temporary_chats: int


def _id(value: str) -> int | str:
    # OneBot declares ids as int64 and go-cqhttp insists; an id that is not a number is passed as it is.
    return int(value) if value.isdigit() else value


class OneBotAdapter(Adapter):
    """A OneBot v11 connection serving one or more bot accounts; see docs/adapters.md and docs/configuration.md.

    Options are those of `OneBotOptions` (`mode`, `url`, `token_env`...); invalid ones raise `AdapterError`
    naming the option. Plugins reach any action with `await adapter.call_action(name, **params)`.
    """

    name = "onebot"
    capabilities = CAPABILITIES

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        try:
            self.settings = OneBotOptions.model_validate(options)
        except ValidationError as exc:
            raise AdapterError(options_error(self.name, "onebot", exc, "docs/configuration.md, 'OneBot'")) from None
        try:
            self._token = self.settings.access_token()
        except ValueError as exc:
            raise AdapterError(f"adapter {self.name!r} (onebot): {exc}") from None
        s = self.settings
        self._accounts = Accounts(
            outbox_size=s.outbox_size,
            max_routes=s.max_routes,
            default_self_id=s.default_self_id,
            on_waiting=self._notify,
        )
        # A deque and one waiter rather than an asyncio.Queue: the reader appends, the one dispatch task pops.
        self._events: deque[tuple[Connection, Frame, dict[str, Any], int]] = deque()
        self._events_waiter: asyncio.Future[None] | None = None
        self._queued_bytes = 0
        self._own_ids: Recent[tuple[str, str], None] = Recent(_OWN_IDS)
        self._group_names: Recent[str, tuple[str, float]] = Recent(_GROUP_NAMES)  # group -> name, loop time due
        self._temp_chats: Recent[str, str] = Recent(s.max_routes)  # session of a temporary chat -> its group
        self._connections: set[Connection] = set()
        self._dropped = 0
        self._dropping = False
        self._pauses = 0
        self._room: asyncio.Future[None] | None = None  # resolved when the full queue has room again
        self._held_back: set[Connection] = set()  # connections told to wait for `_room`
        # Session id -> the session, the first texts refused and how many were: a notice each, bounded like routes.
        self._refused: Recent[str, tuple[Session, list[str], int]] = Recent(s.max_routes)
        self._refusals = asyncio.Event()
        self._malformed = 0
        self._processed = 0
        self._connections_made = 0
        self._changed = asyncio.Event()
        self._watchers = 0
        self._task: asyncio.Task[None] | None = None
        self._server: Server | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self, app: AdapterHost) -> None:
        """Start listening (reverse mode; raises `AdapterError` when the address is taken) or dialling (forward
        mode, in the background: an implementation that is down is retried, not fatal)."""
        await super().start(app)
        if self.settings.mode == "reverse":
            s = self.settings
            if self._token is None and not is_loopback_host(s.host):
                # Anyone who reaches the port could connect as a bot account and have forged messages answered.
                raise AdapterError(
                    f"adapter {self.name!r} (onebot): reverse mode on {s.host}, beyond this machine, "
                    "needs an access token: set options.token_env (the variable holding it) or "
                    "options.token of this [[adapters.instances]] entry, and the same token in the "
                    "implementation, or bind options.host to 127.0.0.1"
                )
            try:
                self._server = await serve_reverse(
                    self._serve_reverse,
                    host=s.host,
                    port=s.port,
                    path=s.path,
                    token=self._token,
                    self_ids=s.self_ids,
                    max_size=s.max_frame_bytes,
                )
            except OSError as exc:
                raise AdapterError(
                    f"adapter {self.name!r} (onebot): cannot listen on {s.host}:{s.port}: {exc}; "
                    "choose another port (option `port`)"
                ) from exc
            logger.info("onebot %s: waiting for implementations on ws://%s:%d%s", self.name, s.host, self.port, s.path)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"hookchat:onebot:{self.name}")

    async def stop(self) -> None:
        """Stop dialling and serving, close every connection; replies still waiting are reported as failed."""
        self._accounts.stop()
        task, self._task = self._task, None
        try:
            await cancel_and_wait(task)
        finally:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None

    @property
    def port(self) -> int:
        """The port the reverse-mode server listens on (the chosen one when the option `port` is 0)."""
        if self._server is None:
            return self.settings.port
        return self._server.sockets[0].getsockname()[1]

    async def wait_connected(self, self_id: str | None = None) -> str:
        """Wait until `self_id` (None: any account) has an open connection; returns the account's id. Bound it
        with a timeout of your own (`anyio.fail_after`)."""
        stats = await self.wait_until(
            lambda s: any(s.accounts.values()) if self_id is None else s.accounts.get(self_id, False)
        )
        return self_id or next(i for i, online in stats.accounts.items() if online)

    async def wait_until(self, condition: Callable[[OneBotStats], bool]) -> OneBotStats:
        """Wait until `condition(self.stats())` holds, checked again whenever a connection opens or closes and
        whenever an event is processed or dropped; returns those stats. Bound it with a timeout of your own."""
        self._watchers += 1
        try:
            while not condition(stats := self.stats()):
                await self._changed.wait()
            return stats
        finally:
            self._watchers -= 1

    def _notify(self) -> None:
        if self._watchers:  # an Event per change costs; only when someone waits
            self._changed.set()
            self._changed = asyncio.Event()

    def stats(self) -> OneBotStats:
        """The sizes of everything the adapter holds."""
        return OneBotStats(
            accounts={a.self_id: a.online for a in self._accounts.accounts.values()},
            connections_made=self._connections_made,
            events_processed=self._processed,
            queued_events=len(self._events),
            queued_bytes=self._queued_bytes,
            dropped_events=self._dropped,
            pauses=self._pauses,
            malformed_frames=self._malformed,
            pending_actions=sum(c.pending for c in self._connections),
            waiting_sends=self._accounts.waiting,
            routes=len(self._accounts.routes),
            own_message_ids=len(self._own_ids),
            group_names=len(self._group_names),
            temporary_chats=len(self._temp_chats),
        )

    async def _run(self) -> None:
        s = self.settings
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._dispatch)
            tg.start_soon(self._tell_refused)
            for url in s.url:
                tg.start_soon(
                    functools.partial(
                        dial_forever,
                        url,
                        self._serve_forward,
                        token=self._token,
                        token_in=s.token_in,
                        max_size=s.max_frame_bytes,
                        initial=s.reconnect_initial,
                        maximum=s.reconnect_max,
                    )
                )

    # -- connections ----------------------------------------------------------------------------------------------

    def _connection(self, ws: WebSocket, peer: str) -> Connection:
        return Connection(
            ws,
            peer=peer,
            max_pending=self.settings.max_pending_actions,
            on_event=self._enqueue,
            on_identified=self._on_identified,
            on_malformed=self._count_malformed,
        )

    async def _serve_forward(self, ws: WebSocket, url: str) -> bool:
        connection = self._connection(ws, url)
        await self._serve(connection)
        return connection.self_id is not None

    async def _serve_reverse(self, ws: WebSocket, self_id: str) -> None:
        connection = self._connection(ws, f"{ws.remote_address} (account {self_id})")
        connection.self_id = self_id
        if not self._accounts.attach(connection):
            logger.warning("onebot %s: refused a second connection for account %s", self.name, self_id)
            await ws.close(CloseCode.POLICY_VIOLATION, f"account {self_id} is already connected")
            return
        self._connected(connection)
        await self._serve(connection)

    async def _serve(self, connection: Connection) -> None:
        self._connections.add(connection)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._learn_account, connection)
                await connection.read()
                tg.cancel_scope.cancel()
        finally:
            self._connections.discard(connection)
            self._accounts.detach(connection)
            self._notify()

    def _on_identified(self, connection: Connection) -> None:
        if not self._accounts.attach(connection):
            # Two forward URLs serving one account: its events still arrive from both; replies use the first.
            logger.warning(
                "onebot %s: account %s is already connected; %s only delivers events",
                self.name,
                connection.self_id,
                connection.peer,
            )
            return
        self._connected(connection)

    def _connected(self, connection: Connection) -> None:
        logger.info("onebot %s: account %s connected through %s", self.name, connection.self_id, connection.peer)
        self._connections_made += 1
        self._notify()

    async def _learn_account(self, connection: Connection) -> None:
        """Ask who is logged in: names the account if no event has, and gives the nickname forward nodes carry."""
        try:
            info = await connection.call("get_login_info", {}, self.settings.action_timeout)
        except OneBotError as exc:
            logger.warning("onebot %s: get_login_info on %s failed: %s", self.name, connection.peer, exc)
            return
        if isinstance(info, dict):
            connection.nickname = str(info.get("nickname") or "")
            connection.identify(str(info.get("user_id") or ""))

    def _count_malformed(self) -> None:
        self._malformed += 1

    # -- incoming -------------------------------------------------------------------------------------------------

    def _enqueue(
        self, connection: Connection, frame: Frame, raw: dict[str, Any], size: int
    ) -> asyncio.Future[None] | None:
        """Queue an event; when the queue is full, a future for the reader to wait on (it resolves when there is
        room). The event that fills the queue is taken (by bytes, the bound is passed by at most one frame per
        connection); one read after that, while the reader had an action's answer to read, is refused."""
        full = (
            len(self._events) >= self.settings.max_queued_events
            or self._queued_bytes + size > self.settings.max_queued_bytes
        )
        if full and connection in self._held_back:
            self._refuse(frame, raw)
        else:
            self._queued_bytes += size
            self._events.append((connection, frame, raw, size))
            waiter = self._events_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            full = (
                len(self._events) >= self.settings.max_queued_events
                or self._queued_bytes >= self.settings.max_queued_bytes
            )
        if not full:
            return None
        if self._room is None:
            self._room = asyncio.get_running_loop().create_future()
            self._pauses += 1
            self._notify()
        self._held_back.add(connection)
        return self._room

    def _refuse(self, frame: Frame, raw: dict[str, Any]) -> None:
        self._dropped += 1
        self._notify()
        if not self._dropping:
            self._dropping = True
            logger.warning(
                "onebot %s: %d events (%d bytes) already wait to be processed (max_queued_events, "
                "max_queued_bytes) while an action's answer must be read; refusing new messages, with "
                "a notice to their senders, until the queue drains",
                self.name,
                len(self._events),
                self._queued_bytes,
            )
        if not isinstance(frame, MessageEvent) or frame.post_type == "message_sent" or frame.user_id == frame.self_id:
            return  # no one to tell: a notice (poke, recall...) or the bot's own message
        message = message_of(frame, self.name, to_me=False, raw=raw)
        assert message.session is not None, "message_of gives every message its session"
        sid = message.session.sid
        self._accounts.route(sid, message.self_id)
        session, texts, count = self._refused.get(sid) or (message.session, [], 0)
        if len(texts) < _REFUSED_SHOWN:
            texts.append(message.chain.message_repr[:80])
        if len(self._refused) >= self._refused.limit and sid not in self._refused:
            logger.warning(
                "onebot %s: more than %d sessions wait for a notice of refused messages; the oldest's is not sent",
                self.name,
                self._refused.limit,
            )
        self._refused.remember(sid, (session, texts, count + 1))
        self._refusals.set()

    async def _tell_refused(self) -> None:
        """Send each session whose messages were refused one notice naming them (`busy_notice`)."""
        while True:
            await self._refusals.wait()
            self._refusals.clear()
            while self._refused:
                sid = next(iter(self._refused))
                session, texts, count = self._refused.pop(sid)
                shown = ", ".join(f'"{t}"' for t in texts) + (
                    f" and {count - len(texts)} more" if count > len(texts) else ""
                )
                chain = MessageChain([Text(self.settings.busy_notice.format(messages=shown, count=count))])
                result = await self.send(session, chain)
                if not result.ok:
                    logger.warning(
                        "onebot %s: %d refused message(s) of %s: the notice failed too: %s",
                        self.name,
                        count,
                        sid,
                        result.error,
                    )

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        dropped_before = 0
        events = self._events
        while True:
            if not events:
                self._events_waiter = loop.create_future()
                try:
                    await self._events_waiter
                finally:
                    self._events_waiter = None
                continue
            connection, frame, raw, size = events.popleft()
            self._queued_bytes -= size
            room = self._room
            if room is not None:
                self._room = None
                self._held_back.clear()
                room.set_result(None)  # the readers go on
            if self._dropping and not events:
                self._dropping = False
                logger.warning(
                    "onebot %s: the event queue drained; %d messages were refused (their senders told)",
                    self.name,
                    self._dropped - dropped_before,
                )
                dropped_before = self._dropped
            try:
                message = await self._message_of(connection, frame, raw)
                if message is None:
                    continue
                assert message.session is not None, "message_of gives every message its session"
                self._accounts.route(message.session.sid, message.self_id)
                assert self.app is not None
                await self.app.receive(message)
            except Exception:
                logger.exception(
                    "onebot %s: failed to deliver an event from %s: %.300r", self.name, connection.peer, raw
                )
            finally:
                self._processed += 1
                self._notify()

    async def _message_of(self, connection: Connection, frame: Frame, raw: dict[str, Any]) -> KiraIMMessage | None:
        if isinstance(frame, NoticeEvent):
            group_id = group_of(frame)
            name = await self._group_name(connection, group_id) if group_id else ""
            return notice_of(frame, self.name, raw=raw, group_name=name)
        if not isinstance(frame, MessageEvent):
            logger.debug("onebot %s: ignored a %s event", self.name, raw.get("post_type"))
            return None
        if frame.post_type == "message_sent" or frame.user_id == frame.self_id:
            self._remember_own(frame.self_id, frame.message_id)
            return None
        group_id = group_of(frame)
        if group_id is not None:
            message = message_of(
                frame, self.name, to_me=False, raw=raw, group_name=await self._group_name(connection, group_id)
            )
        else:
            message = message_of(frame, self.name, to_me=False, raw=raw)
            assert message.session is not None, "message_of gives every message its session"
            self._remember_temp_chat(message.session.sid, frame.temp_group)
        message.is_mentioned = (
            frame.message_type == "private"
            or mentions(message.chain, frame.self_id)
            or await self._quotes_bot(connection, frame.self_id, quoted_id(message.chain))
        )
        return message

    def _remember_temp_chat(self, sid: str, group_id: str | None) -> None:
        # A reply in a temporary chat must name the group it came from (`group_id` of send_msg, as go-cqhttp,
        # NapCat and Lagrange take it); once the person writes as a friend, the chat is an ordinary one.
        if group_id is not None:
            self._temp_chats.remember(sid, group_id)
        elif self._temp_chats:
            self._temp_chats.pop(sid, None)

    async def _group_name(self, connection: Connection, group_id: str) -> str:
        """The group's name from `get_group_info`, remembered for `_GROUP_NAME_TTL`; "" when the implementation
        does not say within `group_info_timeout` (0: never ask), asked again after `_GROUP_NAME_RETRY`."""
        timeout = self.settings.group_info_timeout
        if timeout == 0:
            return ""
        now = asyncio.get_running_loop().time()
        known = self._group_names.get(group_id)
        if known is not None and now < known[1]:
            return known[0]
        try:
            info = await connection.call("get_group_info", {"group_id": _id(group_id)}, timeout, urgent=True)
        except OneBotError as exc:
            logger.debug("onebot %s: no name for group %s: %s", self.name, group_id, exc)
            name, due = (known[0] if known is not None else ""), now + _GROUP_NAME_RETRY
        else:
            name = str(info.get("group_name") or "") if isinstance(info, dict) else ""
            due = now + _GROUP_NAME_TTL
        self._group_names.remember(group_id, (name, due))
        return name

    async def _quotes_bot(self, connection: Connection, self_id: str, message_id: str | None) -> bool:
        if message_id is None:
            return False
        if (self_id, message_id) in self._own_ids:
            return True
        if self.settings.reply_lookup_timeout == 0:
            return False
        try:
            quoted = await connection.call(
                "get_msg", {"message_id": _id(message_id)}, self.settings.reply_lookup_timeout, urgent=True
            )
        except OneBotError as exc:
            logger.debug("onebot %s: cannot tell who wrote quoted message %s: %s", self.name, message_id, exc)
            return False
        if not isinstance(quoted, dict):
            return False
        sender = quoted.get("sender")
        if not isinstance(sender, dict):
            sender = {}
        return str(sender.get("user_id") or quoted.get("user_id") or "") == self_id

    def _remember_own(self, self_id: str, message_id: str) -> None:
        self._own_ids.remember((self_id, message_id), None)

    # -- outgoing -------------------------------------------------------------------------------------------------

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` with `send_msg` (split where QQ needs a voice, video, file or forward on its own; each
        `Poke` with `group_poke`/`friend_poke`). The receipt's `message_id` is the platform's id of the first
        message and `message_ids` has them all (empty for pokes alone), so `recall(receipt)` can delete every
        part. A reply in a temporary chat names the group it came from (`group_id`). Never raises: a refusal, a
        timeout, media that cannot be read or a connection that does not come back in `offline_send_timeout` make
        `ok=False` with the reason in `error`, which is also logged with the session and the action."""
        deadline = asyncio.get_running_loop().time() + self.settings.offline_send_timeout
        sid = session.sid
        chat_id = _id(session.session_id)
        if session.is_group:
            target: dict[str, Any] = {"message_type": "group", "group_id": chat_id}
        else:
            target = {"message_type": "private", "user_id": chat_id}
            temp_group = self._temp_chats.get(sid)
            if temp_group is not None:
                target["group_id"] = _id(temp_group)
        elements = [e for e in chain if not isinstance(e, Poke)]
        pokes = [e for e in chain if isinstance(e, Poke)] if len(elements) < len(chain) else []
        ids: list[str] = []
        action = "send_msg"
        try:
            connection = await self._accounts.connection_for(sid, deadline)
            segments = await to_segments(elements, self_id=connection.self_id or "", nickname=connection.nickname)
            messages = to_messages(segments)
            if not messages and not pokes:
                return KiraIMSentResult(chain, session, ok=False, error="nothing to send: the chain is empty")
            as_cq = self.settings.message_format == "string"
            for number, message in enumerate(messages, 1):
                params = {**target, "message": to_cq(message) if as_cq else message}
                try:
                    data, self_id = await self._call_within(sid, connection, action, params, deadline)
                except OneBotError as exc:
                    if len(messages) > 1:
                        raise OneBotError(f"part {number} of {len(messages)}: {exc}") from exc
                    raise
                message_id = str(data.get("message_id", "")) if isinstance(data, dict) else ""
                self._remember_own(self_id, message_id)
                ids.append(message_id)
            for poke in pokes:  # NapCat's and Lagrange's poke actions; a poke has no message id
                if session.is_group:
                    action, params = "group_poke", {"group_id": chat_id, "user_id": _id(poke.user_id)}
                else:
                    action, params = "friend_poke", {"user_id": _id(poke.user_id)}
                await self._call_within(sid, connection, action, params, deadline)
        except (OneBotError, MediaError) as exc:
            logger.warning("onebot %s: %s to %s failed: %s", self.name, action, sid, exc)
            return KiraIMSentResult(
                chain, session, ok=False, message_id=ids[0] if ids else "", error=str(exc), message_ids=tuple(ids)
            )
        return KiraIMSentResult(chain, session, ok=True, message_id=ids[0] if ids else "", message_ids=tuple(ids))

    async def _call_within(
        self, sid: str, connection: Connection, action: str, params: dict[str, Any], deadline: float
    ) -> tuple[Any, str]:
        # Nothing written yet (NotConnected) is safe to try again on the next connection, within the deadline.
        while True:
            if connection.closed:
                connection = await self._accounts.connection_for(sid, deadline)
            try:
                return await connection.call(action, params, self.settings.action_timeout), connection.self_id or ""
            except NotConnected:
                connection = await self._accounts.connection_for(sid, deadline)

    async def call_action(self, action: str, /, *, self_id: str | None = None, **params: Any) -> Any:
        """Run any OneBot action and return its `data`, e.g. `await adapter.call_action("get_group_list")`.

        `self_id` picks the bot account when several are connected (default: `default_self_id`, else the only
        one). Raises `NotConnected` (the account has no connection now), `ActionTimeout` (no answer within
        `action_timeout`), `ActionFailed` (`status: failed`, with `.retcode` and `.wording`), `ConnectionLost`.
        """
        connection = self._accounts.live(str(self_id) if self_id is not None else None)
        return await connection.call(action, params, self.settings.action_timeout)

    async def get_login_info(self, *, self_id: str | None = None) -> dict[str, Any]:
        """`get_login_info`: the account's `user_id` and `nickname`."""
        return await self.call_action("get_login_info", self_id=self_id)

    async def get_msg(self, message_id: str, *, self_id: str | None = None) -> dict[str, Any]:
        """`get_msg`: a message by its platform id (`sender`, `message`, `time`...)."""
        return await self.call_action("get_msg", self_id=self_id, message_id=_id(message_id))

    async def delete_msg(self, message_id: str, *, self_id: str | None = None) -> None:
        """`delete_msg`: recall a message, e.g. one the bot sent (`KiraIMSentResult.message_id`)."""
        await self.call_action("delete_msg", self_id=self_id, message_id=_id(message_id))

    async def recall(self, receipt: KiraIMSentResult) -> None:
        """Recall everything one send put on the platform: every id of `receipt.message_ids` (a chain QQ took as
        several messages has several), else its `message_id`; through the account that answers its session.
        Every part is tried; then the first `ActionFailed` is raised, if any. Raises `NotConnected` too."""
        ids = receipt.message_ids or ((receipt.message_id,) if receipt.message_id else ())
        connection = self._accounts.live(self._accounts.choose(receipt.session.sid))
        failures: list[ActionFailed] = []
        for message_id in ids:
            try:
                await connection.call("delete_msg", {"message_id": _id(message_id)}, self.settings.action_timeout)
            except ActionFailed as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

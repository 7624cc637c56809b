"""`MatrixAdapter`: a bot account on a Matrix homeserver, through matrix-nio (imported only when an adapter is built,
so hookchat runs without it; `pip install 'hookchat[matrix]'`).

One task long-polls `/sync` and puts the events into one bounded queue (a full queue holds the next sync back: the
homeserver keeps what is not fetched yet, so nothing is dropped); another delivers them in order and records the
sync token once a batch is delivered. The state file is written at most once a second while messages flow (not
once per sync: with messages coming one at a time that was a file write and a thread hop for each) and at `stop`,
so a restart goes on from there and answers nothing twice (a crash, with no `stop`, may answer again what the last
second delivered). Replies wait for a homeserver that is away (up to `offline_send_timeout`), each event under one
transaction id, so a retry never posts it twice. End-to-end encrypted rooms are refused: the bot says so in the
room and leaves it.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import anyio
import httpx
from pydantic import ValidationError

from core.adapter import Adapter, AdapterError, AdapterHost, options_error, require_library
from core.adapter.http_client import Headers, HTTPClient
from core.adapter.matrix._content import (
    MEDIA_MSGTYPES,
    MediaPart,
    TextPart,
    is_edit,
    mentions,
    plan_events,
    replied_to,
    split_text,
    text_of,
)
from core.adapter.matrix._options import MatrixOptions
from core.adapter.matrix._rooms import Rooms
from core.adapter.matrix._state import MatrixState, load_state, save_state
from core.adapter.media import file_suffix, upload_name
from core.chat.message_elements import BaseMessageElement, MediaError, Reply, Sticker, Text
from core.chat.message_utils import KiraIMMessage, KiraIMSentResult, MessageChain
from core.chat.session import Group, Session, User
from core.utils.backoff import backoff_delay
from core.utils.path_utils import get_data_path
from core.utils.recent import Recent
from core.utils.tasks import cancel_and_wait

if TYPE_CHECKING:
    import nio

__all__ = ["MatrixAdapter", "MatrixError", "MatrixStats", "CAPABILITIES", "ENCRYPTION_REFUSAL"]

logger = logging.getLogger("hookchat.adapter.matrix")
_T = TypeVar("_T")

#: What the adapter can send, and so which built-in tags the model is offered.
CAPABILITIES = frozenset({"text", "at", "reply", "image", "file", "record", "video", "sticker"})
#: What the bot says in an end-to-end encrypted room before it leaves (it cannot read what is written there).
ENCRYPTION_REFUSAL = (
    "This bot cannot read end-to-end encrypted messages, so it is leaving this room. Invite it to "
    "a room with encryption turned off (in Element: room settings, Security & Privacy)."
)

_OWN_IDS = 1000  # event ids the bot sent, to tell a reply to the bot without asking the homeserver
_SEEN_IDS = 2000  # event ids delivered lately, so a batch fetched twice is delivered once
_SEND_PATHS = 1000  # rooms' send addresses kept quoted for the next event of the same room and type
_DELIVERED_KEPT = 1000  # delivered ids written to the state file, for a stop in the middle of a batch
_TIMELINE_LIMIT = 100  # events per room per sync; after a longer absence older ones are skipped (logged)
_SAVE_EVERY = 1.0  # seconds between writes of the state file while it changes (and once more at stop)


class MatrixError(AdapterError):
    """The homeserver refused a request or could not be reached in time; the message says which and why."""


@dataclass(frozen=True)
class MatrixStats:
    """The adapter's state by size, for operators and tests."""

    logged_in: bool
    connected: bool
    syncs: int
    sync_failures: int
    events_processed: int
    queued_events: int
    rooms: int
    direct_chats: int
    refused_rooms: int
    invites_left: int
    next_batch: str | None


def _object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one: a field of the homeserver's answer that is missing or of
    another type reads as empty."""
    return value if isinstance(value, dict) else {}


def _events(section: Any) -> list[dict[str, Any]]:
    """The event dicts of a sync section (`{"events": [...]}`), skipping anything that is not one."""
    events = _object(section).get("events")
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


class _Batch:
    """The end of one sync response in the queue: once the dispatcher reaches it, its token is the state's (and is
    written to the state file within `_SAVE_EVERY`)."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


class MatrixAdapter(Adapter):
    """A Matrix account (`user_id` on `homeserver`) logged in by access token or password; see docs/adapters.md.

    Options are those of `MatrixOptions`; invalid ones, an unset secret variable or a missing matrix-nio raise
    `AdapterError` naming the problem, so `hookchat run` refuses to start. Direct chats are sessions
    `<name>:dm:<user id>`, other rooms `<name>:gm:<room id>`.
    """

    name = "matrix"
    capabilities = CAPABILITIES

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        try:
            self.settings = MatrixOptions.model_validate(options)
        except ValidationError as exc:
            raise AdapterError(
                options_error(
                    self.name,
                    "matrix",
                    exc,
                    "docs/adapters.md, 'Matrix'",
                    {(".user_id", "string_pattern_mismatch"): "not a Matrix user id like @bot:example.org"},
                )
            ) from None
        try:
            self._secret_kind, self._secret = self.settings.secret()
        except ValueError as exc:
            raise AdapterError(f"adapter {self.name!r} (matrix): {exc}") from None
        require_library("nio", "matrix", "matrix-nio")  # a missing matrix-nio is an error of building the adapter
        self.client: nio.AsyncClient | None = None
        self._state = MatrixState(self.settings.homeserver, self.settings.user_id)
        self._state_path: Path | None = None
        self._media_dir: Path | None = None
        self._http: httpx.AsyncClient | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | _Batch] = asyncio.Queue(self.settings.max_queued_events)
        self._own_ids: Recent[str, None] = Recent(_OWN_IDS)
        self._seen: Recent[str, None] = Recent(_SEEN_IDS)
        self._refused: set[str] = set()
        self._invites_seen: set[str] = set()  # invites not taken (auto_join off), logged once each
        #: The joined rooms, as the syncs have described them (members, name, encryption).
        self.rooms = Rooms()
        self._tx_prefix = f"hc{time.time_ns():x}"  # transaction ids are unique per access token, across runs too
        self._sent = 0
        self._send_paths: Recent[tuple[str, str], str] = Recent(_SEND_PATHS)  # (room, event type) -> quoted path
        self._display_name: str | None = None
        self._logged_in = False
        self._connected = False
        self._syncs = 0
        self._sync_failures = 0
        self._processed = 0
        self._changed: asyncio.Event | None = None  # what `wait_until` waits on, made when one waits
        self._tasks: list[asyncio.Task[None]] = []
        self._pending_token: str | None = None  # the newest batch fetched, not yet all delivered
        self._state_dirty = False  # changed since the state file was last written
        self._saver: asyncio.Task[None] | None = None
        self._api: HTTPClient | None = None  # `_request`'s
        self._headers = ("", Headers({}))  # (access token, the headers of `_request`)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self, app: AdapterHost) -> None:
        """Log in and start syncing. A homeserver that refuses the login (wrong token or password, another
        account's token) raises `AdapterError`, so the app does not start; one that cannot be reached is tried
        again in the background with backoff."""
        await super().start(app)
        s = self.settings
        home = get_data_path() / "adapters" / "matrix" / self.name
        self._state_path, self._media_dir = home / "state.json", home / "media"
        self._state = await load_state(self._state_path, s.homeserver, s.user_id)
        self._seen.update((event_id, None) for event_id in self._state.delivered)
        import nio  # installed: __init__ required it

        config = nio.AsyncClientConfig(
            max_timeouts=0,
            max_limit_exceeded=5,
            request_timeout=s.request_timeout,
            store_sync_tokens=False,
            encryption_enabled=False,
        )
        self.client = nio.AsyncClient(s.homeserver, s.user_id, device_id=self._state.device_id, config=config)
        self._http = httpx.AsyncClient(timeout=s.request_timeout, follow_redirects=False, trust_env=False)
        self._api = HTTPClient(s.homeserver)
        try:
            await self._login()
        except (TimeoutError, OSError, self._aiohttp_error()) as exc:
            logger.warning(
                "matrix %s: %s is not reachable (%s); trying again in the background", self.name, s.homeserver, exc
            )
        except BaseException:
            await self._close_clients()
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._sync_forever(), name=f"hookchat:matrix:{self.name}:sync"),
            loop.create_task(self._dispatch(), name=f"hookchat:matrix:{self.name}:dispatch"),
        ]

    async def stop(self) -> None:
        """Stop syncing and delivering; the state (sync token, delivered ids) is written first."""
        tasks, self._tasks = self._tasks, []
        try:
            for task in tasks:
                await cancel_and_wait(task)
        finally:
            try:
                if self._saver is not None:
                    await cancel_and_wait(self._saver)  # a write under way finishes first (its thread is not cut)
                if self._state_path is not None and self._logged_in:
                    await save_state(self._state_path, self._state)
            finally:
                await self._close_clients()

    async def _close_clients(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._api is not None:
            await self._api.close()
            self._api = None

    def _aiohttp_error(self) -> type[Exception]:
        import aiohttp  # matrix-nio's transport, present whenever nio is

        return aiohttp.ClientError

    async def _login(self) -> None:
        """Log in (password) or check the token (`whoami`); raises `AdapterError` when the homeserver refuses."""
        import nio  # installed: __init__ required it

        client, s = self.client, self.settings
        assert client is not None
        where = f"adapter {self.name!r} (matrix)"
        if self._secret_kind == "password":
            response = await client.login(password=self._secret, device_name=s.device_name)
            if isinstance(response, nio.LoginError):
                raise AdapterError(
                    f"{where}: {s.homeserver} refused the password login of {s.user_id}: "
                    f"{response.message} ({response.status_code}); check password_env"
                )
        else:
            client.access_token = self._secret
            response = await client.whoami()
            if isinstance(response, nio.WhoamiError):
                raise AdapterError(
                    f"{where}: {s.homeserver} refused the access token: {response.message} "
                    f"({response.status_code}); check access_token_env"
                )
            if response.user_id != s.user_id:
                raise AdapterError(
                    f"{where}: the access token belongs to {response.user_id}, not {s.user_id}; "
                    "set user_id to the token's account"
                )
            client.user_id, client.device_id = response.user_id, response.device_id
        if client.device_id != self._state.device_id:
            self._state.device_id = client.device_id
        name = await client.get_displayname()
        self._display_name = getattr(name, "displayname", None)
        self._logged_in = True
        logger.info(
            "matrix %s: logged in as %s (device %s) on %s", self.name, s.user_id, client.device_id, s.homeserver
        )
        self._notify()

    # -- waiting (tests, health checks) -----------------------------------------------------------------------------

    def stats(self) -> MatrixStats:
        """The adapter's figures now."""
        return MatrixStats(
            logged_in=self._logged_in,
            connected=self._connected,
            syncs=self._syncs,
            sync_failures=self._sync_failures,
            events_processed=self._processed,
            queued_events=self._queue.qsize(),
            rooms=len(self.rooms),
            direct_chats=len(self._state.direct),
            refused_rooms=len(self._refused),
            invites_left=len(self._invites_seen),
            next_batch=self._state.next_batch,
        )

    async def wait_until(self, condition: Callable[[MatrixStats], bool]) -> MatrixStats:
        """Wait until `condition(self.stats())` holds, checked after every sync and every event processed; returns
        those stats. Bound it with a timeout of your own."""
        while not condition(stats := self.stats()):
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()
        return stats

    def _notify(self) -> None:
        changed, self._changed = self._changed, None  # an event for every message, most with nobody waiting
        if changed is not None:
            changed.set()

    # -- incoming -------------------------------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, request_timeout: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One client-server API request through the adapter's `HTTPClient`, answered as (status, JSON body). Used
        for the two requests made per message (`/sync`, `send`): nio's own methods check every event against JSON
        schemas, which costs more than the rest of a turn and blocks the loop for seconds on a large sync, and its
        aiohttp session costs a fifth of a turn's CPU a request."""
        client, http = self.client, self._api
        assert client is not None and http is not None
        token = client.access_token
        if self._headers[0] != token:
            self._headers = (token, Headers({"Authorization": f"Bearer {token}"}))
        answer = await http.request(
            method,
            path,
            json.dumps(body).encode() if body is not None else None,
            headers=self._headers[1],
            timeout=self.settings.request_timeout if request_timeout is None else request_timeout,
        )
        try:
            data = json.loads(answer.body)
        except ValueError:
            data = None
        return answer.status, data if isinstance(data, dict) else {}

    async def _sync_forever(self) -> None:
        s = self.settings
        transport_errors = (OSError, asyncio.TimeoutError, self._aiohttp_error())
        sync_filter = json.dumps(
            {
                "presence": {"not_types": ["*"]},
                "account_data": {"not_types": ["*"]},
                "room": {
                    "timeline": {"limit": _TIMELINE_LIMIT},
                    "ephemeral": {"not_types": ["*"]},
                    "account_data": {"not_types": ["*"]},
                },
            },
            separators=(",", ":"),
        )
        failures = 0
        full_state = True  # the rooms' members, names and encryption, once per run
        while True:
            if failures:
                await asyncio.sleep(backoff_delay(failures - 1, s.reconnect_initial, s.reconnect_max))
            query = {"timeout": str(int(s.sync_timeout * 1000)), "filter": sync_filter}
            since = self._since()
            if since is not None:
                query["since"] = since
            if full_state and since is not None:
                query["full_state"] = "true"
            try:
                if not self._logged_in:
                    await self._login()
                status, data = await self._request(
                    "GET",
                    f"/_matrix/client/v3/sync?{urlencode(query)}",
                    request_timeout=s.sync_timeout + s.request_timeout,
                )
            except AdapterError as exc:
                logger.error("%s; trying again later", exc)
                failures += 1
                continue
            except transport_errors as exc:
                failures += 1
                self._sync_failed(f"{s.homeserver} is not reachable ({exc or type(exc).__name__})", failures)
                continue
            if status != 200 or not isinstance(data.get("next_batch"), str):
                failures += 1
                code, words = data.get("errcode", status), data.get("error", "no next_batch in the answer")
                if code in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"):
                    self._logged_in = False
                    if self._secret_kind == "access_token":
                        logger.error(
                            "matrix %s: the homeserver no longer accepts the access token (%s); set a new "
                            "one in %s and restart",
                            self.name,
                            words,
                            s.access_token_env,
                        )
                self._sync_failed(f"sync refused: {words} ({code})", failures)
                continue
            if failures:
                logger.info("matrix %s: syncing again with %s", self.name, s.homeserver)
            failures, full_state = 0, False
            self._connected = True
            await self._take(data)
            self._syncs += 1
            self._notify()

    def _since(self) -> str | None:
        return self._pending_token or self._state.next_batch

    def _sync_failed(self, reason: str, failures: int) -> None:
        self._sync_failures += 1
        if self._connected or failures == 1:
            logger.warning("matrix %s: %s; retrying with backoff", self.name, reason)
        self._connected = False
        self._notify()

    async def _take(self, data: dict[str, Any]) -> None:
        """Queue a sync response's messages (waiting while the queue is full), then its token; keep each room's
        state; join the rooms the bot was invited to (when `auto_join`), and refuse the encrypted ones."""
        rooms = _object(data.get("rooms"))
        invite, join, leave = (_object(rooms.get(k)) for k in ("invite", "join", "leave"))
        for room_id in leave:
            self.rooms.pop(room_id, None)
        for room_id, info in invite.items():
            await self._invited(room_id, _object(info))
        first_ever = self._state.next_batch is None and self._pending_token is None
        catching_up = self._syncs == 0  # the first sync of a restart: every room was joined before
        for room_id, info in join.items():
            if not isinstance(info, dict):
                continue
            state = _events(info.get("state"))
            timeline_info = _object(info.get("timeline"))
            timeline = _events(timeline_info)
            known = catching_up or room_id in self.rooms
            self.rooms.update_from(room_id, state + timeline)
            await self._refuse_if_encrypted(room_id)
            if timeline_info.get("limited") and known and not first_ever:
                logger.warning(
                    "matrix %s: more than %d events arrived in %s while the bot was away; only the last "
                    "%d are answered",
                    self.name,
                    _TIMELINE_LIMIT,
                    room_id,
                    _TIMELINE_LIMIT,
                )
            if first_ever:
                continue  # the first sync of an account shows recent history: not for answering
            for event in timeline:
                await self._queue.put((room_id, event))
        token = str(data["next_batch"])
        self._pending_token = token
        await self._queue.put(_Batch(token))

    async def _invited(self, room_id: str, invite: dict[str, Any]) -> None:
        events = _events(invite.get("invite_state"))
        inviter = next(
            (
                str(e.get("sender"))
                for e in events
                if e.get("type") == "m.room.member" and e.get("state_key") == self.settings.user_id
            ),
            "someone",
        )
        if not self.settings.auto_join:
            if room_id not in self._invites_seen:
                self._invites_seen.add(room_id)
                logger.info(
                    "matrix %s: %s invited the bot to %s; not joining (auto_join is off)", self.name, inviter, room_id
                )
            return
        import nio  # installed: __init__ required it

        assert self.client is not None
        response = await self.client.join(room_id)
        if isinstance(response, nio.JoinError):
            logger.warning(
                "matrix %s: cannot join %s (invited by %s): %s", self.name, room_id, inviter, response.message
            )
        else:
            logger.info("matrix %s: joined %s (invited by %s)", self.name, room_id, inviter)

    async def _refuse_if_encrypted(self, room_id: str) -> None:
        room = self.rooms.get(room_id)
        if room is None or not room.encrypted or room_id in self._refused:
            return
        self._refused.add(room_id)
        logger.warning(
            "matrix %s: %s is end-to-end encrypted, which this adapter does not support; leaving it "
            "(invite the bot to a room without encryption)",
            self.name,
            room_id,
        )
        assert self.client is not None
        try:
            await self.client.room_send(
                room_id, "m.room.message", {"msgtype": "m.notice", "body": ENCRYPTION_REFUSAL, "m.mentions": {}}
            )
            await self.client.room_leave(room_id)
        except (TimeoutError, OSError, self._aiohttp_error()) as exc:
            logger.warning("matrix %s: could not leave %s: %s", self.name, room_id, exc)

    async def _dispatch(self) -> None:
        while True:
            item = await self._queue.get()
            if isinstance(item, _Batch):
                self._state.next_batch = item.token
                self._state.delivered.clear()
                if self._pending_token == item.token:
                    self._pending_token = None
                self._state_changed()
                self._notify()
                continue
            room_id, source = item
            try:
                message = await self._message_of(room_id, source)
                if message is not None:
                    assert self.app is not None
                    await self.app.receive(message)
            except Exception:
                logger.exception(
                    "matrix %s: failed to deliver event %s in %s", self.name, source.get("event_id"), room_id
                )
            finally:
                self._processed += 1
                self._notify()

    def _state_changed(self) -> None:
        self._state_dirty = True
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(
                self._save_while_changing(), name=f"hookchat:matrix:{self.name}:state"
            )

    async def _save_while_changing(self) -> None:
        while self._state_dirty:
            await asyncio.sleep(_SAVE_EVERY)
            self._state_dirty = False
            if self._state_path is None:
                return
            try:
                await save_state(self._state_path, self._state)
            except OSError as exc:  # tried again with the next change, and at stop
                logger.warning("matrix %s: cannot write %s: %s", self.name, self._state_path, exc)

    async def _message_of(self, room_id: str, source: dict[str, Any]) -> KiraIMMessage | None:
        event_id, sender = str(source.get("event_id") or ""), str(source.get("sender") or "")
        event_type, content = source.get("type"), source.get("content")
        if sender == self.settings.user_id:
            self._own_ids.remember(event_id, None)
            return None
        if not event_id or event_id in self._seen or not isinstance(content, dict) or "state_key" in source:
            return None
        if room_id in self._refused or event_type not in ("m.room.message", "m.sticker"):
            return None  # reactions, redactions, encrypted events (their room is refused)
        msgtype = content.get("msgtype") if event_type == "m.room.message" else "m.sticker"
        if msgtype == "m.notice" or is_edit(content):
            return None  # notices are what bots send (answering them loops bots); edits are not new messages
        self._seen.remember(event_id, None)
        self._state.delivered.append(event_id)
        del self._state.delivered[:-_DELIVERED_KEPT]
        chain: list[BaseMessageElement] = []
        quoted = replied_to(content)
        if quoted:
            chain.append(Reply(quoted))
        if msgtype in MEDIA_MSGTYPES or msgtype == "m.sticker":
            chain.extend(await self._media_in(str(msgtype), content))
        else:
            text = text_of(content)
            chain.append(Text(f"* {text}" if msgtype == "m.emote" else text))
        room = self.rooms.get(room_id)
        nickname = (room.user_name(sender) if room is not None else None) or sender
        me = self.settings.user_id
        direct = room is not None and len(room.members) <= 2
        if direct:
            self._state.direct[sender] = room_id
            session, group = Session(self.name, "dm", sender), None
        else:
            session = Session(self.name, "gm", room_id)
            group = Group(room_id, room.display_name(me) if room is not None else "")
        my_name = (room.user_name(me) if room is not None else None) or self._display_name
        to_me = direct or mentions(content, me, my_name) or await self._quotes_bot(room_id, quoted)
        ts = source.get("origin_server_ts")
        return KiraIMMessage(
            MessageChain(chain),
            User(sender, nickname),
            session,
            group=group,
            message_id=event_id,
            is_mentioned=to_me,
            timestamp=ts / 1000 if isinstance(ts, (int, float)) else 0.0,
            raw=source,
            self_id=me,
        )

    async def _quotes_bot(self, room_id: str, event_id: str | None) -> bool:
        if event_id is None:
            return False
        if event_id in self._own_ids:
            return True
        if self.settings.reply_lookup_timeout == 0 or self.client is None:
            return False
        try:
            response = await asyncio.wait_for(
                self.client.room_get_event(room_id, event_id), self.settings.reply_lookup_timeout
            )
        except (TimeoutError, OSError, self._aiohttp_error()) as exc:
            logger.debug("matrix %s: cannot tell who wrote %s: %s", self.name, event_id, exc)
            return False
        event = getattr(response, "event", None)
        return getattr(event, "sender", None) == self.settings.user_id

    async def _media_in(self, msgtype: str, content: dict[str, Any]) -> list[BaseMessageElement]:
        """The media element of a media message, downloaded from the homeserver into the adapter's media folder
        (a file over `max_download_bytes` is not: it arrives with its `mxc://` URL only), and the caption, if the
        message has one (`body` beside a `filename`)."""
        kind = Sticker if msgtype == "m.sticker" else MEDIA_MSGTYPES[msgtype]
        body = content.get("body") if isinstance(content.get("body"), str) else ""
        filename = content.get("filename") if isinstance(content.get("filename"), str) else None
        info = _object(content.get("info"))
        mime = info.get("mimetype") if isinstance(info.get("mimetype"), str) else None
        name = filename or body or None
        url = content.get("url")
        out: list[BaseMessageElement] = []
        if not isinstance(url, str) or not url.startswith("mxc://"):
            # An encrypted file (`file` instead of `url`) only appears in encrypted rooms, which are refused.
            out.append(Text(f"[{kind.type} that cannot be downloaded]"))
        else:
            try:
                path = await self._download(url, name, mime, info.get("size"))
            except MediaError as exc:
                logger.warning("matrix %s: %s", self.name, exc)
                out.append(kind(url=url, name=name, mime=mime))
            else:
                out.append(kind(path=str(path), name=name, mime=mime))
        if filename and body and body != filename:
            out.append(Text(body))
        return out

    async def _download(self, mxc: str, name: str | None, mime: str | None, size: Any) -> Path:
        """Fetch `mxc` from the homeserver (the authenticated media API), at most `max_download_bytes`, into the
        media folder under a name made from its content; raises `MediaError` saying why not."""
        limit = self.settings.max_download_bytes
        if isinstance(size, int) and size > limit:
            raise MediaError(f"{mxc} is {size} bytes, over max_download_bytes ({limit}); not downloaded")
        parts = urlsplit(mxc)
        server, media_id = parts.netloc, parts.path.lstrip("/")
        if not server or not media_id or "/" in media_id:
            raise MediaError(f"{mxc!r} is not an mxc://server/media-id URI")
        assert self._http is not None and self.client is not None and self._media_dir is not None
        base = self.settings.homeserver
        headers = {"Authorization": f"Bearer {self.client.access_token}"}
        urls = [
            f"{base}/_matrix/client/v1/media/download/{quote(server)}/{quote(media_id)}",
            f"{base}/_matrix/media/v3/download/{quote(server)}/{quote(media_id)}",
        ]  # before Matrix 1.11
        data = bytearray()
        try:
            for url in urls:
                async with self._http.stream("GET", url, headers=headers) as response:
                    if response.status_code in (404, 405) and url is urls[0]:
                        continue
                    if response.status_code != 200:
                        raise MediaError(f"cannot download {mxc}: the homeserver answered {response.status_code}")
                    async for chunk in response.aiter_bytes():
                        data += chunk
                        if len(data) > limit:
                            raise MediaError(f"{mxc} is over max_download_bytes ({limit}); not downloaded")
                    mime = mime or response.headers.get("content-type")
                    break
        except httpx.HTTPError as exc:
            raise MediaError(f"cannot download {mxc}: {exc}") from exc
        target = self._media_dir / f"{hashlib.sha256(data).hexdigest()[:32]}{file_suffix(name, mime)}"

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                partial = target.with_name(target.name + ".part")
                partial.write_bytes(data)
                partial.replace(target)

        await anyio.to_thread.run_sync(write)
        return target

    # -- outgoing -------------------------------------------------------------------------------------------------

    async def _room_of(self, session: Session) -> str:
        if session.is_group:
            return session.session_id
        room_id = self._state.direct.get(session.session_id)
        if room_id is not None:
            return room_id
        import nio  # installed: __init__ required it

        assert self.client is not None
        response = await self.client.room_create(
            is_direct=True, invite=[session.session_id], preset=nio.RoomPreset.trusted_private_chat
        )
        if isinstance(response, nio.RoomCreateError):
            raise MatrixError(
                f"no direct chat with {session.session_id} yet, and creating one failed: {response.message}"
            )
        self._state.direct[session.session_id] = response.room_id
        return response.room_id

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` as Matrix events, in order: text and mentions as one `m.text` event (with `m.mentions` and
        pills), each media element uploaded to the homeserver and sent as its own `m.image`/`m.file`/`m.audio`/
        `m.video`/`m.sticker` event; a `Reply` makes the first event a reply. A direct chat nobody has opened yet
        is created (the person is invited). The receipt has every event id (`message_ids`, the first as
        `message_id`). Never raises: a refusal, unreadable media, or a homeserver away for longer than
        `offline_send_timeout` make `ok=False` with the reason in `error`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.offline_send_timeout
        ids: list[str] = []
        try:
            if self.client is None or not self._logged_in:
                await self._wait_logged_in(deadline)
            room_id = await self._room_of(session)
            room = self.rooms.get(room_id)
            if room_id in self._refused or (room is not None and room.encrypted):
                raise MatrixError(f"{room_id} is end-to-end encrypted; the Matrix adapter does not send there")
            parts = plan_events(chain, room.members if room is not None else None)
            if not parts:
                return KiraIMSentResult(chain, session, ok=False, error="nothing to send: the chain is empty")
            for part in parts:
                if isinstance(part, TextPart):
                    for piece in split_text(part, self.settings.max_text_chars):
                        ids.append(await self._room_send(room_id, "m.room.message", piece.content(), deadline))
                else:
                    event_type, content = await self._media_content(part, deadline)
                    ids.append(await self._room_send(room_id, event_type, content, deadline))
        except (MatrixError, MediaError) as exc:
            logger.warning("matrix %s: sending to %s failed: %s", self.name, session.sid, exc)
            return KiraIMSentResult(
                chain, session, ok=False, message_id=ids[0] if ids else "", error=str(exc), message_ids=tuple(ids)
            )
        return KiraIMSentResult(chain, session, ok=True, message_id=ids[0], message_ids=tuple(ids))

    async def _wait_logged_in(self, deadline: float) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(self.wait_until(lambda s: s.logged_in), max(remaining, 0))
        except TimeoutError:
            raise MatrixError(
                f"not logged in to {self.settings.homeserver} within offline_send_timeout "
                f"({self.settings.offline_send_timeout:g} s)"
            ) from None

    async def _retrying(self, what: str, call: Callable[[], Awaitable[_T]], deadline: float) -> _T:
        """`await call()` again after transport failures (the homeserver restarting), with backoff, until
        `deadline`; the caller makes `call` idempotent (one transaction id)."""
        loop = asyncio.get_running_loop()
        transport_errors = (OSError, asyncio.TimeoutError, self._aiohttp_error())
        failures = 0
        while True:
            try:
                return await call()
            except transport_errors as exc:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise MatrixError(
                        f"{what}: {self.settings.homeserver} not reachable within "
                        f"offline_send_timeout ({self.settings.offline_send_timeout:g} s): "
                        f"{exc or type(exc).__name__}"
                    ) from None
                s = self.settings
                await asyncio.sleep(min(remaining, backoff_delay(failures, s.reconnect_initial, s.reconnect_max)))
                failures += 1

    async def _room_send(self, room_id: str, event_type: str, content: dict[str, Any], deadline: float) -> str:
        # One transaction id per event, kept across retries: the homeserver posts it once however often it is sent.
        self._sent += 1
        prefix = self._send_paths.get((room_id, event_type))
        if prefix is None:
            prefix = f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/send/{quote(event_type, safe='')}/"
            self._send_paths.remember((room_id, event_type), prefix)
        path = f"{prefix}{self._tx_prefix}.{self._sent}"
        status, data = await self._retrying("send", lambda: self._request("PUT", path, content), deadline)
        event_id = data.get("event_id")
        if status != 200 or not isinstance(event_id, str):
            raise MatrixError(
                f"the homeserver refused the {event_type} event: {data.get('error', 'no event id')} "
                f"({data.get('errcode', status)})"
            )
        self._own_ids.remember(event_id, None)
        return event_id

    async def _media_content(self, part: MediaPart, deadline: float) -> tuple[str, dict[str, Any]]:
        import nio  # installed: __init__ required it

        element = part.element
        mime = element.guess_mime()
        name = upload_name(element)
        info: dict[str, Any] = {"mimetype": mime}
        if element.source == "url":  # mxc:// (plan_events sends other URLs as links)
            url = str(element.url)
        else:
            data = await element.get_bytes()
            if len(data) > self.settings.max_upload_bytes:
                raise MediaError(
                    f"{name} is {len(data)} bytes, over max_upload_bytes ({self.settings.max_upload_bytes})"
                )
            info["size"] = len(data)
            assert self.client is not None
            client = self.client
            response, _ = await self._retrying(
                "upload",
                lambda: client.upload(io.BytesIO(data), content_type=mime, filename=name, filesize=len(data)),
                deadline,
            )
            if isinstance(response, nio.UploadError):
                raise MatrixError(f"the homeserver refused the upload of {name}: {response.message}")
            url = response.content_uri
        content: dict[str, Any] = {"body": name, "url": url, "info": info, "m.mentions": {}}
        if part.msgtype == "m.sticker":
            event_type = "m.sticker"
        else:
            event_type = "m.room.message"
            content["msgtype"] = part.msgtype
            content["filename"] = name
        if part.reply_to:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": part.reply_to}}
        return event_type, content

    async def recall(self, receipt: KiraIMSentResult) -> None:
        """Redact every event one send posted (`receipt.message_ids`, else its `message_id`). Every one is tried;
        then the first refusal is raised as `MatrixError`."""
        import nio  # installed: __init__ required it

        ids = receipt.message_ids or ((receipt.message_id,) if receipt.message_id else ())
        room_id = await self._room_of(receipt.session)
        assert self.client is not None
        failures: list[str] = []
        for event_id in ids:
            response = await self.client.room_redact(room_id, event_id)
            if isinstance(response, nio.RoomRedactError):
                failures.append(f"cannot redact {event_id}: {response.message} ({response.status_code})")
        if failures:
            raise MatrixError(failures[0])

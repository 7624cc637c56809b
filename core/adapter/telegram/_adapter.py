"""`TelegramAdapter`: a Telegram bot through the Bot API, on aiogram 3.

Updates arrive by long polling (`getUpdates`) or at a webhook (`setWebhook` with a secret token), or through an
aiogram `Dispatcher` of your own (`attach`); either way they wait in one bounded queue (polling stops fetching while it
is full; the webhook answers 503 so Telegram delivers again later) and one task turns them into `KiraIMMessage`s,
in order. Replies go out with `sendMessage` (split at 4,096 characters) and one send per media element; a 429
answer is waited out (`retry_after`) and the send tried again.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import random
import re
import ssl
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiogram
import certifi
from aiogram import Bot, Dispatcher, Router, methods
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    ClientDecodeError,
    TelegramConflictError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.methods.base import Response, TelegramMethod
from aiogram.types import BufferedInputFile, Chat, FSInputFile, Message, MessageEntity, ReplyParameters, Update
from aiogram.types import User as TelegramUser
from aiogram.utils.token import TokenValidationError
from aiohttp import web
from pydantic import ValidationError

from core.adapter import Adapter, AdapterError, AdapterHost, options_error
from core.adapter.adapter_utils import DelayedTyping
from core.adapter.http_client import HTTPClient
from core.adapter.media import MediaElement, file_suffix, upload_name
from core.adapter.telegram._convert import Outgoing, entities_to_elements, to_outgoing
from core.adapter.telegram._options import LOOPBACK_HOSTS, TelegramOptions
from core.chat.message_elements import BaseMessageElement, File, Image, MediaError, Record, Reply, Sticker, Video
from core.chat.message_utils import KiraIMMessage, KiraIMSentResult, MessageChain
from core.chat.session import Group, Session, User
from core.utils.path_utils import get_data_path
from core.utils.recent import Recent
from core.utils.tasks import cancel_and_wait

__all__ = ["TelegramAdapter", "CAPABILITIES", "SECRET_HEADER"]

logger = logging.getLogger("hookchat.adapter.telegram")

#: What the adapter can send, and so which built-in tags the model is offered.
CAPABILITIES = frozenset({"text", "at", "reply", "image", "sticker", "record", "file", "video"})
#: The header Telegram puts the webhook's secret token in.
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: The updates asked for: messages only (an edited message is not delivered again; see docs/adapters.md).
ALLOWED_UPDATES = ["message"]
_TYPING_EVERY = 4.5  # seconds; Telegram shows a chat action for 5 s or until the bot's next message
_TYPING_AFTER = 0.5  # seconds of model work before "typing..." is shown: a quick answer needs no indicator
_HEADERS = {"User-Agent": f"aiogram/{aiogram.__version__}"}  # what aiogram's own requests say
# aiogram parses every answer as `Response[<type>]`, a pydantic generic class that pydantic caches only weakly:
# once the garbage collector frees it, the next call builds it again (tens of milliseconds of CPU, seen in a
# profile of bench/adapters.py). These references keep the classes of the methods the adapter calls alive.
_RESPONSE_TYPES = tuple(
    {
        Response[m.__returning__]
        for m in (
            methods.GetMe,
            methods.GetUpdates,
            methods.SendMessage,
            methods.SendPhoto,
            methods.SendVoice,
            methods.SendDocument,
            methods.SendSticker,
            methods.SendVideo,
            methods.DeleteMessage,
            methods.SendChatAction,
            methods.SetWebhook,
            methods.DeleteWebhook,
            methods.GetFile,
        )
    }
)

_SHARED_MODELS = 1000  # chats' and senders' models kept for the next message of the same chat or sender
#: The fields of a polled message that is text and nothing else (no entities, reply, media, forward or edit).
_PLAIN_TEXT_KEYS = frozenset({"message_id", "date", "chat", "from", "text"})
#: The largest `date` pydantic reads as seconds (beyond it, milliseconds): a plain text's date is taken as seconds.
_SECONDS_UP_TO = 20_000_000_000

T = TypeVar("T")


class TelegramAdapter(Adapter):
    """A Telegram bot; see docs/adapters.md ("Telegram") for its options and behaviour.

    Options are those of `TelegramOptions`; a refused one raises `AdapterError` naming it. `self.bot` is the
    aiogram `Bot` (plugins may call any Bot API method with it); `self.me` is the bot's own account once known.
    """

    name = "telegram"
    capabilities = CAPABILITIES

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        try:
            self.settings = TelegramOptions.model_validate(options)
        except ValidationError as exc:
            raise AdapterError(options_error(self.name, "telegram", exc, "docs/adapters.md, 'Telegram'")) from None
        s = self.settings
        try:
            token = s.bot_token()
            self._secret = s.secret_token() if s.mode == "webhook" else ""
        except ValueError as exc:
            raise AdapterError(f"adapter {self.name!r} (telegram): {exc}") from None
        try:
            self._session = AiohttpSession(
                api=TelegramAPIServer.from_base(s.api_url.rstrip("/")), timeout=s.request_timeout
            )
            self.bot = Bot(token, session=self._session)
        except TokenValidationError:
            raise AdapterError(
                f"adapter {self.name!r} (telegram): ${s.token_env} does not hold a bot token (they "
                "look like 123456789:AAE...; @BotFather's /token shows it)"
            ) from None
        self.me: TelegramUser | None = None
        self.router = Router(name=f"hookchat:{self.name}")
        self.router.message.register(self._on_message)
        self._queue: asyncio.Queue[Message | _PlainText] = asyncio.Queue(s.max_queued_updates)
        self._external = False
        self._tasks: list[asyncio.Task[None]] = []
        self._typing = DelayedTyping(_TYPING_AFTER, f"hookchat:telegram:{self.name}:typing")
        self._runner: web.AppRunner | None = None
        self._port = s.port
        self._senders: dict[str, Callable[..., Awaitable[Any]]] = {
            "photo": self.bot.send_photo,
            "voice": self.bot.send_voice,
            "document": self.bot.send_document,
            "sticker": self.bot.send_sticker,
            "video": self.bot.send_video,
        }
        self.dropped_updates = 0  # webhook requests answered 503 because the queue was full
        self._http: HTTPClient | None = None  # `_post`'s, made with its first request
        self._targets: dict[str, str] = {}  # Bot API method -> the path of its address (`_post`)
        # ("chat" or "from", id) -> the fields last seen and their model, shared by the messages that repeat them
        self._models: Recent[tuple[str, Any], tuple[dict[str, Any], Chat | TelegramUser]] = Recent(_SHARED_MODELS)

    def attach(self, bot: Bot, dispatcher: Dispatcher) -> None:
        """Serve through an aiogram `Bot` and `Dispatcher` that you run (your own aiogram application, or a test
        client such as aiogram-test-framework's): the adapter's router joins `dispatcher`, replies go through `bot`,
        and `start` neither polls nor sets a webhook. Call it before `start`."""
        self.bot = bot
        self._senders = {
            "photo": bot.send_photo,
            "voice": bot.send_voice,
            "document": bot.send_document,
            "sticker": bot.send_sticker,
            "video": bot.send_video,
        }
        dispatcher.include_router(self.router)
        self._external = True

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self, app: AdapterHost) -> None:
        """Check the token (`getMe`; a token Telegram rejects stops the start with `AdapterError`), then poll or
        serve the webhook in the background. Telegram being unreachable is not fatal: it is retried with backoff.
        Raises `AdapterError` when the webhook's address is taken."""
        await super().start(app)
        try:
            self.me = await self.bot.get_me()
        except TelegramUnauthorizedError as exc:
            await self.bot.session.close()
            raise AdapterError(
                f"adapter {self.name!r} (telegram): Telegram refused the token in "
                f"${self.settings.token_env} ({exc.message}); check it with @BotFather"
            ) from None
        except AiogramError as exc:
            logger.warning("telegram %s: getMe failed (%s); retrying in the background", self.name, exc)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._dispatch(), name=f"hookchat:telegram:{self.name}:dispatch"))
        if self._external:
            return
        if self.settings.mode == "webhook":
            await self._listen()
            self._tasks.append(
                loop.create_task(self._register_webhook(), name=f"hookchat:telegram:{self.name}:webhook")
            )
        else:
            self._tasks.append(loop.create_task(self._poll(), name=f"hookchat:telegram:{self.name}:poll"))

    async def stop(self) -> None:
        """Stop polling or listening and delivering; close the HTTP session. (The webhook stays registered:
        Telegram keeps the updates that arrive meanwhile and delivers them when the listener is back.)"""
        tasks, self._tasks = self._tasks, []
        try:
            for task in reversed(tasks):
                await cancel_and_wait(task)
        finally:
            if self._runner is not None:
                await self._runner.cleanup()
                self._runner = None
            if not self._external:
                await self.bot.session.close()
            if self._http is not None:
                await self._http.close()
                self._http = None

    @property
    def port(self) -> int:
        """The port the webhook listener is bound to (the chosen one when the option `port` is 0)."""
        return self._port

    @property
    def queued_updates(self) -> int:
        """Messages received and not yet delivered to the app."""
        return self._queue.qsize()

    async def _known_me(self) -> TelegramUser:
        delay = self.settings.reconnect_initial
        while self.me is None:
            try:
                self.me = await self.bot.get_me()
            except AiogramError as exc:
                logger.warning("telegram %s: getMe failed (%s); next try in %.0f s", self.name, exc, delay)
                delay = await self._backoff(delay)
        return self.me

    async def _backoff(self, delay: float) -> float:
        await asyncio.sleep(delay * random.uniform(0.8, 1.2))
        return min(delay * 2, self.settings.reconnect_max)

    # -- incoming -------------------------------------------------------------------------------------------------

    async def _on_message(self, message: Message | _PlainText) -> None:
        await self._queue.put(message)  # a full queue holds the poller (or the webhook request) here

    async def _on_update(self, update: Update) -> None:
        # Updates the adapter fetches itself skip aiogram's dispatcher (its FSM and middlewares serve handlers the
        # adapter does not have); `attach` feeds the same `_on_message` through the router.
        if update.message is not None:
            await self._on_message(update.message)

    async def _poll(self) -> None:
        s = self.settings
        await self._known_me()
        try:
            await self.bot.delete_webhook(drop_pending_updates=False)  # getUpdates is refused while one is set
        except AiogramError as exc:
            logger.warning("telegram %s: deleteWebhook failed: %s", self.name, exc)
        offset: int | None = None
        delay = s.reconnect_initial
        logger.info("telegram %s: polling for updates as @%s", self.name, self.me.username if self.me else "?")
        while True:
            try:
                updates = await self._get_updates(offset)
            except TelegramRetryAfter as exc:
                await asyncio.sleep(exc.retry_after)
                continue
            except TelegramConflictError as exc:
                logger.warning(
                    "telegram %s: getUpdates conflicts with another poller of this bot (%s); only one "
                    "process may poll a bot; next try in %.0f s",
                    self.name,
                    exc.message,
                    delay,
                )
                delay = await self._backoff(delay)
                continue
            except TelegramUnauthorizedError as exc:
                logger.error(
                    "telegram %s: Telegram refuses the token now (%s): was it revoked? Set the new one "
                    "in $%s and restart",
                    self.name,
                    exc.message,
                    s.token_env,
                )
                delay = await self._backoff(s.reconnect_max)
                continue
            except AiogramError as exc:  # TelegramAPIError, or an answer that is not the Bot API's
                logger.warning("telegram %s: getUpdates failed (%s); next try in %.0f s", self.name, exc, delay)
                delay = await self._backoff(delay)
                continue
            delay = s.reconnect_initial
            for update_id, message in updates:
                offset = update_id + 1  # confirmed with the next getUpdates, once it is queued
                if message is not None:
                    await self._on_message(message)

    async def _get_updates(self, offset: int | None) -> list[tuple[int, Message | _PlainText | None]]:
        """The next updates: each one's id and its message (None for an update of another kind)."""
        s = self.settings

        def method() -> methods.GetUpdates:
            return methods.GetUpdates(offset=offset, timeout=s.poll_timeout, allowed_updates=ALLOWED_UPDATES)

        if not self._plain_http():
            updates = await self.bot(method(), request_timeout=int(s.poll_timeout + s.request_timeout))
            return [(update.update_id, update.message) for update in updates]
        fields: dict[str, Any] = {"timeout": s.poll_timeout, "allowed_updates": ALLOWED_UPDATES}
        if offset is not None:
            fields["offset"] = offset
        result = await self._post("getUpdates", fields, s.poll_timeout + s.request_timeout, method)
        try:
            return [(int(update["update_id"]), self._message(update.get("message"))) for update in result]
        except (ValidationError, TypeError, KeyError, ValueError) as exc:  # as aiogram reports an answer that
            raise ClientDecodeError("Failed to deserialize object", exc, result) from exc  # is not the Bot API's

    def _message(self, fields: Any) -> Message | _PlainText | None:
        """The `Message` of an update's `message` (None when it has none), validated on its own (not inside an
        `Update`), its `chat` and `from` the models made for the same fields before: aiogram's models are frozen,
        so messages of one chat share them, and pydantic validates half as much (about 10 us a message). A plain
        text message (`_PlainText`) is not validated until something reads its `Message`."""
        if fields is None:
            return None
        if not isinstance(fields, dict):
            raise TypeError(f"an update's message is {type(fields).__name__}, not an object")
        fields = dict(fields)
        for key, model in (("chat", Chat), ("from", TelegramUser)):
            value = fields.get(key)
            if isinstance(value, dict) and "id" in value:
                known = self._models.get((key, value["id"]))
                if known is None or known[0] != value:
                    known = (value, model.model_validate(value, context={"bot": self.bot}))
                    self._models.remember((key, value["id"]), known)
                fields[key] = known[1]
        if (
            fields.keys() == _PLAIN_TEXT_KEYS
            and type(fields["message_id"]) is int
            and type(fields["date"]) is int
            and 0 <= fields["date"] <= _SECONDS_UP_TO
            and type(fields["text"]) is str
            and isinstance(fields["chat"], Chat)
            and isinstance(fields["from"], TelegramUser)
        ):
            return _PlainText(fields, self.bot)
        return Message.model_validate(fields, context={"bot": self.bot})

    async def _listen(self) -> None:
        s = self.settings
        secret = self._secret.encode()

        async def receive(request: web.Request) -> web.Response:
            if request.headers.get("Origin") is not None:
                return web.Response(status=403, text="updates are not accepted from a browser page\n")
            given = request.headers.get(SECRET_HEADER, "").encode()
            if not given:
                return web.Response(status=401, text=f"the {SECRET_HEADER} header is required\n")
            if not hmac.compare_digest(given, secret):
                return web.Response(status=403, text="wrong secret token\n")
            if self._queue.full():
                self.dropped_updates += 1
                logger.warning(
                    "telegram %s: %d updates wait to be delivered (max_queued_updates); answered 503, "
                    "Telegram will deliver it again",
                    self.name,
                    self._queue.qsize(),
                )
                return web.Response(status=503, headers={"Retry-After": "1"}, text="busy, try again\n")
            try:
                update = Update.model_validate(await request.json(), context={"bot": self.bot})
            except (ValueError, ValidationError) as exc:
                return web.Response(status=400, text=f"not a Telegram update: {str(exc)[:200]}\n")
            await self._on_update(update)
            return web.Response(status=200)

        application = web.Application(client_max_size=s.max_body_bytes)
        application.router.add_post(s.path, receive)
        self._runner = web.AppRunner(application, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, s.host, s.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise AdapterError(
                f"adapter {self.name!r} (telegram): cannot listen on {s.host}:{s.port}: {exc}; "
                "choose another port (option `port`)"
            ) from exc
        self._port = self._runner.addresses[0][1]
        if s.host not in LOOPBACK_HOSTS:
            logger.info(
                "telegram %s: the webhook listener on %s:%d is reachable from other machines; every "
                "request must carry the secret token",
                self.name,
                s.host,
                self._port,
            )
        logger.info("telegram %s: webhook listener on http://%s:%d%s", self.name, s.host, self._port, s.path)

    async def _register_webhook(self) -> None:
        s = self.settings
        delay = s.reconnect_initial
        while True:
            try:
                await self.bot.set_webhook(
                    s.webhook_url or "",
                    secret_token=self._secret,
                    allowed_updates=ALLOWED_UPDATES,
                    drop_pending_updates=False,
                )
                logger.info("telegram %s: webhook registered at %s", self.name, s.webhook_url)
                await self._known_me()
                return
            except AiogramError as exc:
                logger.warning("telegram %s: setWebhook failed (%s); next try in %.0f s", self.name, exc, delay)
                delay = await self._backoff(delay)

    async def _dispatch(self) -> None:
        while True:
            message = await self._queue.get()
            try:
                me = await self._known_me()
                if isinstance(message, _PlainText):
                    incoming = self._incoming_text(message, me)
                else:
                    incoming = await self._incoming(message, me)
                if incoming is not None:
                    assert self.app is not None
                    await self.app.receive(incoming)
            except Exception:
                logger.exception(
                    "telegram %s: failed to deliver message %s of chat %s",
                    self.name,
                    message.message_id,
                    message.chat.id,
                )

    def _origin(
        self, chat: Chat, author: TelegramUser | None, sender_chat: Chat | None, me: TelegramUser
    ) -> tuple[Session, Group | None, User] | None:
        """The session, group and sender of a message; None for the bot's own messages and channel posts."""
        if author is not None and author.id == me.id:
            return None
        if chat.type == "private":
            session, group = Session(self.name, "dm", str(chat.id)), None
        elif chat.type in ("group", "supergroup"):
            session, group = Session(self.name, "gm", str(chat.id)), Group(str(chat.id), chat.title or "")
        else:
            return None
        if author is not None:
            return session, group, User(str(author.id), author.full_name or author.username or str(author.id))
        origin = sender_chat or chat  # an anonymous group admin or a linked channel writes as the chat
        return session, group, User(str(origin.id), origin.title or "")

    def _incoming_text(self, plain: _PlainText, me: TelegramUser) -> KiraIMMessage | None:
        """A plain text message as hookchat sees it, as `_incoming` makes it of the same message validated; its
        `raw` is the aiogram `Message`, validated when first read."""
        origin = self._origin(plain.chat, plain.author, None, me)
        if origin is None:
            return None
        session, group, sender = origin
        elements, _ = entities_to_elements(plain.text, None, bot_id=me.id, bot_username=me.username or "")
        return _PolledMessage(
            MessageChain(elements),
            sender,
            session,
            group=group,
            message_id=str(plain.message_id),
            is_mentioned=plain.chat.type == "private",
            timestamp=float(plain.date),
            raw=plain,
        )

    async def _incoming(self, message: Message, me: TelegramUser) -> KiraIMMessage | None:
        """The message as hookchat sees it; None for the bot's own messages and channel posts."""
        chat = message.chat
        origin = self._origin(chat, message.from_user, message.sender_chat, me)
        if origin is None:
            return None
        session, group, sender = origin
        chain: list[BaseMessageElement] = []
        quoted = message.reply_to_message
        if quoted is not None:
            chain.append(Reply(str(quoted.message_id)))
        text, entities = (
            (message.text, message.entities)
            if message.text is not None
            else (message.caption or "", message.caption_entities)
        )
        media = await self._media_of(message)
        if media is not None:
            chain.append(media)
        elements, addressed = entities_to_elements(text, entities, bot_id=me.id, bot_username=me.username or "")
        chain.extend(elements)
        to_me = (
            chat.type == "private"
            or addressed
            or (quoted is not None and quoted.from_user is not None and quoted.from_user.id == me.id)
        )
        return KiraIMMessage(
            MessageChain(chain),
            sender,
            session,
            group=group,
            message_id=str(message.message_id),
            is_mentioned=to_me,
            timestamp=message.date.timestamp(),
            raw=message,
        )

    async def _media_of(self, message: Message) -> MediaElement | None:
        """The message's photo, sticker, voice or audio, video or document, downloaded into the data directory
        when `download_media` is on and it is within `max_download_bytes`; else named only."""
        found: tuple[type[MediaElement], str, str, int | None, str | None, str | None] | None = None
        if message.photo:
            size = message.photo[-1]  # the largest
            found = (Image, size.file_id, size.file_unique_id, size.file_size, None, "image/jpeg")
        elif message.sticker:
            s = message.sticker
            mime = "video/webm" if s.is_video else "application/x-tgsticker" if s.is_animated else "image/webp"
            found = (Sticker, s.file_id, s.file_unique_id, s.file_size, s.emoji, mime)
        elif message.voice:
            v = message.voice
            found = (Record, v.file_id, v.file_unique_id, v.file_size, None, v.mime_type or "audio/ogg")
        elif message.audio:
            a = message.audio
            found = (Record, a.file_id, a.file_unique_id, a.file_size, a.file_name, a.mime_type)
        elif message.video or message.video_note or message.animation:
            v = message.video or message.video_note or message.animation
            assert v is not None
            found = (
                Video,
                v.file_id,
                v.file_unique_id,
                v.file_size,
                getattr(v, "file_name", None),
                getattr(v, "mime_type", None) or "video/mp4",
            )
        elif message.document:
            d = message.document
            found = (File, d.file_id, d.file_unique_id, d.file_size, d.file_name, d.mime_type)
        if found is None:
            return None
        kind, file_id, unique_id, size, name, mime = found
        s = self.settings
        if not s.download_media or (size is not None and size > s.max_download_bytes):
            return kind(name=name or file_id, mime=mime)
        target = self.download_path(unique_id, name, mime)
        try:
            await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
            await self._with_retry(lambda: self.bot.download(file_id, destination=target))
        except (AiogramError, OSError, AttributeError, TypeError) as exc:
            # AttributeError/TypeError: a Bot API server that answers getFile without a file (a test double)
            logger.warning("telegram %s: cannot download %s %s: %s", self.name, kind.type, file_id, exc)
            return kind(name=name or file_id, mime=mime)
        return kind(path=str(target), name=name, mime=mime)

    def download_path(self, unique_id: str, name: str | None, mime: str | None) -> Path:
        """Where a received file is kept: `<data>/telegram/<adapter name>/<file_unique_id><suffix>`, the suffix from
        the file's name or MIME type. Only letters, digits, `_` and `-` of the id and a short alphanumeric suffix
        are used, so no name a sender chooses can point elsewhere."""
        safe_id = re.sub(r"[^A-Za-z0-9_-]", "_", unique_id)[:64] or "file"
        return get_data_path() / "telegram" / self.name / f"{safe_id}{file_suffix(name, mime)}"

    # -- outgoing -------------------------------------------------------------------------------------------------

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` to the chat of `session`: its text (split at 4,096 characters) with `sendMessage`, each
        photo, voice, document, sticker or video with its own method; a `Reply` quotes with the first send. The
        receipt's `message_ids` holds every Telegram message id, in order. Never raises: a refusal or media that
        cannot be read makes `ok=False` with Telegram's words in `error` (logged with the session)."""
        sends = to_outgoing(chain)
        if not sends:
            return KiraIMSentResult(chain, session, ok=False, error="nothing to send: the chain has no text or media")
        ids: list[str] = []
        try:
            chat_id = int(session.session_id)
        except ValueError:
            return KiraIMSentResult(chain, session, ok=False, error=f"{session.session_id!r} is not a Telegram chat id")
        for number, out in enumerate(sends, 1):
            try:
                sent = await self._with_retry(lambda out=out: self._send_one(chat_id, out))
            except (AiogramError, MediaError) as exc:
                where = f"part {number} of {len(sends)} ({out.method}): " if len(sends) > 1 else ""
                logger.warning("telegram %s: send to %s failed: %s%s", self.name, session.sid, where, exc)
                return KiraIMSentResult(
                    chain,
                    session,
                    ok=False,
                    message_id=ids[0] if ids else "",
                    error=f"{where}{exc}",
                    message_ids=tuple(ids),
                )
            ids.append(sent)
        return KiraIMSentResult(chain, session, ok=True, message_id=ids[0], message_ids=tuple(ids))

    async def _send_one(self, chat_id: int, out: Outgoing) -> str:
        """Send one part; the Telegram id of the message it made ("" when the answer has none)."""
        reply = (
            ReplyParameters(message_id=out.reply_to, allow_sending_without_reply=True)
            if out.reply_to is not None
            else None
        )
        if out.method == "message":

            def method() -> methods.SendMessage:
                entities = [MessageEntity.model_validate(e) for e in out.entities] or None
                return methods.SendMessage(chat_id=chat_id, text=out.text, entities=entities, reply_parameters=reply)

            if not self._plain_http():
                sent = await self.bot(method())
                return str(sent.message_id) if isinstance(sent, Message) else ""
            fields: dict[str, Any] = {"chat_id": chat_id, "text": out.text}
            if out.entities:
                fields["entities"] = out.entities
            if out.reply_to is not None:
                fields["reply_parameters"] = {"message_id": out.reply_to, "allow_sending_without_reply": True}
            answer = await self._post("sendMessage", fields, self.settings.request_timeout, method)
            return str(answer["message_id"]) if isinstance(answer, dict) and "message_id" in answer else ""
        assert out.media is not None
        sent = await self._senders[out.method](
            chat_id=chat_id, reply_parameters=reply, **{out.method: await _input_file(out.media)}
        )
        return str(sent.message_id) if isinstance(sent, Message) else ""

    def _plain_http(self) -> bool:
        """Whether the requests made for every message (`getUpdates`, `sendMessage`) may skip aiogram's models and
        HTTP session (`_post`): while the bot's session is the adapter's own (no proxy), with no request middleware
        (one registered on `self.bot.session` sees every request that goes through aiogram). Building those
        models, the form and its answer's models is half the CPU of a send through aiogram, and aiohttp most of
        the rest (measured against a Bot API server on loopback)."""
        return not self._external and self.bot.session is self._session and not self._session.middleware

    async def _post(
        self, name: str, fields: dict[str, Any], timeout: float, method: Callable[[], TelegramMethod[Any]]
    ) -> Any:
        """Bot API method `name` with `fields` as a JSON body (which the Bot API takes for every method but
        uploads; cheaper to make than a urlencoded form), through the adapter's `HTTPClient` (a fifth of aiohttp's
        CPU a request): the answer's `result` as JSON when Telegram says ok. Otherwise aiogram reads the answer,
        given the request as its model (`method()`), and raises what `self.bot(method())` would: a 429 is
        `TelegramRetryAfter`, a refusal `TelegramBadRequest`, no answer `TelegramNetworkError`."""
        session = self._session
        if self._http is None:
            api = self.settings.api_url
            # verified as aiogram's session verifies: with certifi's certificate authorities
            context = ssl.create_default_context(cafile=certifi.where()) if api.startswith("https:") else None
            self._http = HTTPClient(api, headers=_HEADERS, ssl_context=context)
        target = self._targets.get(name)
        if target is None:
            target = self._targets[name] = urlsplit(session.api.api_url(token=self.bot.token, method=name)).path
        try:
            # sent again when a kept-alive connection turns out closed by Telegram before it read the request
            answer = await self._http.request(
                "POST", target, json.dumps(fields).encode(), timeout=timeout, retry_unanswered=True
            )
        except TimeoutError as exc:
            raise TelegramNetworkError(method=method(), message="Request timeout error") from exc
        except OSError as exc:
            raise TelegramNetworkError(method=method(), message=f"{type(exc).__name__}: {exc}") from exc
        if 200 <= answer.status <= 226:
            try:
                result = json.loads(answer.body)
            except ValueError:
                result = None
            if isinstance(result, dict) and result.get("ok") is True:
                return result.get("result")
        # raises for every answer the fast path does not take, but an `ok` that only pydantic reads as true
        response = session.check_response(
            bot=self.bot, method=method(), status_code=answer.status, content=answer.body.decode("utf-8", "replace")
        )
        return response.model_dump(mode="json", by_alias=True, exclude_none=True).get("result")

    def typing(self, session: Session) -> AbstractAsyncContextManager[None]:
        """Telegram's "typing..." in the chat of `session` while the model writes, from half a second on
        (`sendChatAction`, renewed every 4.5 s); a chat action that fails is only logged (debug)."""
        return self._typing.held(lambda: self._keep_typing(session))

    async def _keep_typing(self, session: Session) -> None:
        try:
            chat_id = int(session.session_id)
            while True:
                await self.bot.send_chat_action(chat_id, "typing")
                await asyncio.sleep(_TYPING_EVERY)
        except (AiogramError, ValueError) as exc:
            logger.debug("telegram %s: no typing indicator in %s: %s", self.name, session.sid, exc)

    async def _with_retry(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, waiting out 429 answers (`retry_after`) up to `max_retry_after` seconds in all."""
        waited = 0.0
        while True:
            try:
                return await call()
            except TelegramRetryAfter as exc:
                if waited + exc.retry_after > self.settings.max_retry_after:
                    raise
                logger.info("telegram %s: rate limited; waiting %d s as Telegram asks", self.name, exc.retry_after)
                await asyncio.sleep(exc.retry_after)
                waited += exc.retry_after

    async def recall(self, receipt: KiraIMSentResult) -> None:
        """Delete every message of one send (`deleteMessage` for each id of `receipt.message_ids`). Telegram lets
        a bot delete its own messages for 48 hours. Every part is tried; then the first failure is raised
        (`aiogram.exceptions.TelegramAPIError`, or `AiogramError` for an answer that is not the Bot API's)."""
        ids = receipt.message_ids or ((receipt.message_id,) if receipt.message_id else ())
        chat_id = int(receipt.session.session_id)
        failures: list[AiogramError] = []
        for message_id in ids:
            if not message_id:
                continue
            try:
                await self._with_retry(lambda m=int(message_id): self.bot.delete_message(chat_id, m))
            except AiogramError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]


async def _input_file(media: MediaElement) -> Any:
    """What the Bot API takes for a media element: a file to upload (path or bytes) or a URL Telegram fetches."""
    if media.path:
        return FSInputFile(media.path, filename=upload_name(media))
    if media.source in ("base64", "data_url"):
        return BufferedInputFile(await media.get_bytes(), filename=upload_name(media))
    if media.url:
        return media.url
    raise MediaError(f"{media.type} has nothing to send (no url, path or base64)")


class _PlainText:
    """A polled message that is text and nothing else (`_PLAIN_TEXT_KEYS`), not yet validated as aiogram's
    `Message`: its `chat` and `from` already are (shared models), and the rest are an int id, a date in seconds
    and a str, so the validation cannot fail; it is done when something reads the message's `raw`
    (`_PolledMessage`). Most turns never do, and pydantic's `Message` (over a hundred optional fields) was a third
    of what the adapter added to a message (callgrind)."""

    __slots__ = ("fields", "bot", "message_id", "date", "text", "chat", "author")

    def __init__(self, fields: dict[str, Any], bot: Bot) -> None:
        self.fields, self.bot = fields, bot
        self.message_id: int = fields["message_id"]
        self.date: int = fields["date"]
        self.text: str = fields["text"]
        self.chat: Chat = fields["chat"]
        self.author: TelegramUser = fields["from"]

    def validated(self) -> Message:
        """The aiogram `Message`, bound to the bot as a validated one is."""
        return Message.model_validate(self.fields, context={"bot": self.bot})


_RAW = KiraIMMessage.raw  # the field's slot, under the property below


class _PolledMessage(KiraIMMessage):
    """A `KiraIMMessage` of a `_PlainText`, whose `raw` is the aiogram `Message`, validated on first read."""

    __slots__ = ()

    @property
    def raw(self) -> Any:
        """The aiogram `Message` (validated now if nothing has read it yet)."""
        value = _RAW.__get__(self)
        if isinstance(value, _PlainText):
            value = value.validated()
            _RAW.__set__(self, value)
        return value

    @raw.setter
    def raw(self, value: Any) -> None:
        _RAW.__set__(self, value)

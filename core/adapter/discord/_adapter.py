"""`DiscordAdapter`: a Discord bot on discord.py 2, in guild channels (threads included) and direct messages.

discord.py holds the gateway connection (it resumes or reconnects with backoff, and waits out 429s on the REST
API itself); each message it dispatches waits in one bounded queue and one task turns them into `KiraIMMessage`s,
in order. Replies go out as messages of at most 2,000 characters, files and embeds with the last one, and the
typing indicator shows while the model writes.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import discord
from discord.http import handle_message_parameters
from discord.utils import MISSING
from pydantic import ValidationError

from core.adapter import Adapter, AdapterError, AdapterHost, options_error
from core.adapter.adapter_utils import DelayedTyping
from core.adapter.discord._convert import (
    Part,
    attachment_element,
    content_to_elements,
    to_parts,
)
from core.adapter.discord._options import DiscordOptions
from core.adapter.media import MediaElement, upload_name
from core.chat.message_elements import BaseMessageElement, MediaError, Reply, Sticker
from core.chat.message_utils import KiraIMMessage, KiraIMSentResult, MessageChain
from core.chat.session import Group, Session, User
from core.utils.recent import Recent
from core.utils.tasks import cancel_and_wait

__all__ = ["DiscordAdapter", "CAPABILITIES", "INTENTS"]

logger = logging.getLogger("hookchat.adapter.discord")

#: What the adapter can send (`embed`: the `<embed>` tag's rich card), and so which tags the model is offered.
CAPABILITIES = frozenset({"text", "at", "reply", "image", "file", "record", "video", "sticker", "embed"})
#: The gateway intents the bot asks for; `message_content` must also be switched on in the Developer Portal.
INTENTS = discord.Intents(guilds=True, guild_messages=True, dm_messages=True, message_content=True)
_OWN_IDS = 1000  # ids of messages the bot sent, to tell a reply to the bot when Discord did not resolve it
_CHANNELS = 1000  # sessions whose channel is kept, so each answer does not look it up again
_TYPING_EVERY = 8.0  # seconds; Discord shows "typing" for 10 s after each trigger
_TYPING_AFTER = 0.5  # seconds of model work before "typing..." is shown: a quick answer needs no indicator
#: The channels the bot sends to and deletes in: a guild's text, voice or stage channel, a thread, a DM (each has an
#: id and `get_partial_message`; a group DM, which a bot cannot join, has no `get_partial_message`).
_Channel = (
    discord.TextChannel
    | discord.VoiceChannel
    | discord.StageChannel
    | discord.Thread
    | discord.DMChannel
    | discord.PartialMessageable
)


class DiscordAdapter(Adapter):
    """A Discord bot; see docs/adapters.md ("Discord") for its options, intents and behaviour.

    Options are those of `DiscordOptions`; a refused one raises `AdapterError` naming it. `self.client` is the
    discord.py `Client` (plugins may use any of its API). Sessions: `name:gm:<channel id>` for a guild channel or
    thread, `name:dm:<user id>` for a direct message.
    """

    name = "discord"
    capabilities = CAPABILITIES
    #: The gateway intents the client asks for.
    intents = INTENTS

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        try:
            self.settings = DiscordOptions.model_validate(options)
        except ValidationError as exc:
            raise AdapterError(options_error(self.name, "discord", exc, "docs/adapters.md, 'Discord'")) from None
        try:
            self._token = self.settings.bot_token()
        except ValueError as exc:
            raise AdapterError(f"adapter {self.name!r} (discord): {exc}") from None
        mentions = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)
        self.client: discord.Client = _Client(self._received, intents=self.intents, allowed_mentions=mentions)
        self._queue: deque[discord.Message] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._own_ids: deque[int] = deque(maxlen=_OWN_IDS)
        self._channels: Recent[str, _Channel] = Recent(_CHANNELS)  # session id -> where its answers go
        # Each message's nonce (Discord posts a nonce once): from a random start, not discord.py's os.urandom per
        # message, a system call that gives up the interpreter lock (seen in a profile of bench/adapters.py).
        self._nonces = itertools.count(random.getrandbits(62))
        self._tasks: list[asyncio.Task[None]] = []
        self._typing = DelayedTyping(_TYPING_AFTER, f"hookchat:discord:{self.name}:typing")
        self.dropped_messages = 0
        self._dropping = False

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self, app: AdapterHost) -> None:
        """Log in (a token Discord refuses stops the start with `AdapterError`) and open the gateway connection
        in the background."""
        await super().start(app)
        self._tasks.append(
            asyncio.get_running_loop().create_task(self._dispatch(), name=f"hookchat:discord:{self.name}:dispatch")
        )
        await self.connect()

    async def connect(self) -> None:
        """Log in with the token and hold the gateway connection (a task): discord.py resumes or reconnects with
        backoff; a connection that fails outright is tried again from `reconnect_initial` to `reconnect_max`
        seconds. (The dpytest-based tests replace this with dpytest's own backend.)"""
        try:
            await self.client.login(self._token)
        except discord.LoginFailure as exc:
            await self.client.close()
            raise AdapterError(
                f"adapter {self.name!r} (discord): Discord refused the token in "
                f"${self.settings.token_env} ({exc}); reset it in the Developer Portal (Bot)"
            ) from None
        except (OSError, aiohttp.ClientError, discord.HTTPException) as exc:
            logger.warning("discord %s: cannot log in yet (%s); retrying in the background", self.name, exc)
        self._tasks.append(
            asyncio.get_running_loop().create_task(self._hold_gateway(), name=f"hookchat:discord:{self.name}:gateway")
        )

    async def _hold_gateway(self) -> None:
        s = self.settings
        delay = s.reconnect_initial
        while True:
            try:
                if self.client.user is None:
                    await self.client.login(self._token)
                await self.client.connect(reconnect=True)
                return
            except discord.PrivilegedIntentsRequired:
                logger.error(
                    "discord %s: the Message Content intent is off for this bot: switch it on in the "
                    "Developer Portal (Bot, Privileged Gateway Intents) and restart",
                    self.name,
                )
                return
            except discord.LoginFailure as exc:
                logger.error("discord %s: Discord refuses the token in $%s (%s)", self.name, s.token_env, exc)
                return
            except (
                OSError,
                aiohttp.ClientError,
                discord.HTTPException,
                discord.GatewayNotFound,
                discord.ConnectionClosed,
            ) as exc:
                logger.warning("discord %s: gateway connection failed (%s); next try in %.0f s", self.name, exc, delay)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, s.reconnect_max)

    async def stop(self) -> None:
        """Close the gateway connection and stop delivering."""
        tasks, self._tasks = self._tasks, []
        try:
            for task in reversed(tasks):
                await cancel_and_wait(task)
        finally:
            await self.disconnect()

    async def disconnect(self) -> None:
        """Close the gateway connection and the HTTP session (the counterpart of `connect`)."""
        if not self.client.is_closed():
            await self.client.close()

    @property
    def queued_messages(self) -> int:
        """Messages received and not yet delivered to the app."""
        return len(self._queue)

    # -- incoming -------------------------------------------------------------------------------------------------

    def _received(self, message: discord.Message) -> None:
        """Every message discord.py parses, as it parses it (the bot's own included): queue it for delivery
        (bounded by `max_queued_messages`; more are dropped, with a warning when dropping starts)."""
        me = self.client.user
        if me is not None and message.author.id == me.id:
            return
        if self.settings.ignore_bots and message.author.bot:
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, boosts...: not something a person wrote
        if len(self._queue) >= self.settings.max_queued_messages:
            self.dropped_messages += 1
            if not self._dropping:
                self._dropping = True
                logger.warning(
                    "discord %s: %d messages already wait to be delivered (max_queued_messages); "
                    "dropping new ones until the queue drains",
                    self.name,
                    len(self._queue),
                )
            return
        self._queue.append(message)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._dropping = False
                self._waiter = loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
                continue
            message = self._queue.popleft()
            try:
                assert self.app is not None
                await self.app.receive(self.incoming(message))
            except Exception:
                logger.exception(
                    "discord %s: failed to deliver message %s of channel %s", self.name, message.id, message.channel.id
                )

    def incoming(self, message: discord.Message) -> KiraIMMessage:
        """`message` as hookchat sees it (the conversion on its own, for tests and plugins)."""
        me = self.client.user
        me_id = me.id if me is not None else 0
        chain: list[BaseMessageElement] = []
        reference = message.reference
        if reference is not None and reference.message_id is not None:
            chain.append(Reply(str(reference.message_id)))
        names = {user.id: user.display_name for user in message.mentions}
        chain.extend(content_to_elements(message.content, names))
        chain.extend(attachment_element(a.url, a.filename, a.content_type) for a in message.attachments)
        chain.extend(Sticker(url=s.url, name=s.name) for s in message.stickers)
        author = message.author
        guild = message.guild
        if guild is None:
            session = Session(self.name, "dm", str(author.id))
            group = None
        else:
            session = Session(self.name, "gm", str(message.channel.id))
            group = Group(str(message.channel.id), f"{guild.name} #{getattr(message.channel, 'name', '')}")
        to_me = guild is None or any(user.id == me_id for user in message.mentions) or self._replies_to_bot(message)
        return KiraIMMessage(
            MessageChain(chain),
            User(str(author.id), author.display_name),
            session,
            group=group,
            message_id=str(message.id),
            is_mentioned=to_me,
            timestamp=message.created_at.timestamp(),
            raw=message,
        )

    def _replies_to_bot(self, message: discord.Message) -> bool:
        reference = message.reference
        if reference is None or reference.message_id is None:
            return False
        resolved = reference.resolved
        me = self.client.user
        if isinstance(resolved, discord.Message) and me is not None:
            return resolved.author.id == me.id
        return reference.message_id in self._own_ids

    # -- outgoing -------------------------------------------------------------------------------------------------

    async def _channel(self, session: Session) -> _Channel:
        """The channel of `session`, found once (discord.py's lookup walks the guilds' channels on every call; a
        channel deleted since is refused by Discord when sent to)."""
        channel = self._channels.get(session.sid)
        if channel is not None:
            return channel
        target = int(session.session_id)
        if session.is_group:
            found = self.client.get_channel(target) or await self.client.fetch_channel(target)
            if not isinstance(found, _Channel):
                raise AdapterError(f"channel {target} is not one messages can be sent to")
            channel = found
        else:
            user = self.client.get_user(target) or await self.client.fetch_user(target)
            channel = user.dm_channel or await user.create_dm()
        self._channels.remember(session.sid, channel)
        return channel

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` to the channel (or the user's DM) of `session`: content split at 2,000 characters, files
        and embeds with the last part, a `Reply` as a reply of the first. The receipt's `message_ids` holds every
        Discord message id, in order. Never raises: a refusal (no permission, unknown channel) or media that cannot
        be read makes `ok=False` with Discord's words in `error`."""
        parts = to_parts(chain)
        if not parts:
            return KiraIMSentResult(chain, session, ok=False, error="nothing to send: the chain has no text or media")
        ids: list[str] = []
        try:
            channel = await self._channel(session)
            for number, part in enumerate(parts, 1):
                try:
                    sent = await self._send_part(channel, part)
                except (discord.HTTPException, MediaError) as exc:
                    if len(parts) > 1:
                        raise AdapterError(f"part {number} of {len(parts)}: {exc}") from exc
                    raise
                self._own_ids.append(sent)
                ids.append(str(sent))
        except (discord.HTTPException, MediaError, AdapterError, ValueError) as exc:
            logger.warning("discord %s: send to %s failed: %s", self.name, session.sid, exc)
            return KiraIMSentResult(
                chain, session, ok=False, message_id=ids[0] if ids else "", error=str(exc), message_ids=tuple(ids)
            )
        return KiraIMSentResult(chain, session, ok=True, message_id=ids[0], message_ids=tuple(ids))

    async def _send_part(self, channel: _Channel, part: Part) -> int:
        """Send one part; the id of the message Discord made. What `channel.send` does with the same arguments
        (its parameters, discord.py's HTTP client, which waits out 429s), but for building a `discord.Message` of
        the answer, of which only the id is read: a third of discord.py's work for a message (seen in a profile of
        bench/adapters.py), the gateway's echo of the message being another."""
        reference = (
            discord.MessageReference(
                message_id=part.reply_to, channel_id=channel.id, fail_if_not_exists=False
            ).to_message_reference_dict()
            if part.reply_to is not None
            else MISSING
        )
        files = [await self._upload(media) for media in part.files] if part.files else MISSING
        with handle_message_parameters(
            content=part.content or None,
            nonce=next(self._nonces),
            files=files,
            embeds=[_embed(e) for e in part.embeds] if part.embeds else MISSING,
            allowed_mentions=None,
            message_reference=reference,
            previous_allowed_mentions=self.client.allowed_mentions,
        ) as params:
            data = await self.client.http.send_message(channel.id, params=params)
        return int(data["id"])

    async def _upload(self, media: MediaElement) -> discord.File:
        data = await media.get_bytes()  # a path is read in a worker thread
        if len(data) > self.settings.max_upload_bytes:
            raise MediaError(
                f"{media.type} of {len(data):,} bytes is above max_upload_bytes "
                f"({self.settings.max_upload_bytes:,}; Discord's limit depends on the server)"
            )
        return discord.File(io.BytesIO(data), filename=upload_name(media))

    async def recall(self, receipt: KiraIMSentResult) -> None:
        """Delete every message of one send (each id of `receipt.message_ids`). Every part is tried; then the first
        failure is raised (`discord.HTTPException`)."""
        ids = receipt.message_ids or ((receipt.message_id,) if receipt.message_id else ())
        channel = await self._channel(receipt.session)
        failures: list[discord.HTTPException] = []
        for message_id in ids:
            try:
                await channel.get_partial_message(int(message_id)).delete()
            except discord.HTTPException as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def typing(self, session: Session) -> AbstractAsyncContextManager[None]:
        """Discord's "<bot> is typing..." in the session's channel while the model writes, from half a second on
        (option `typing`)."""
        if not self.settings.typing:
            return super().typing(session)
        return self._typing.held(lambda: self._keep_typing(session))

    async def _keep_typing(self, session: Session) -> None:
        try:
            channel = await self._channel(session)
            while True:
                await channel.typing()  # one trigger; Discord shows it for 10 s or until the bot's next message
                await asyncio.sleep(_TYPING_EVERY)
        except (discord.HTTPException, AdapterError, ValueError, OSError, aiohttp.ClientError) as exc:
            logger.debug("discord %s: no typing indicator in %s: %s", self.name, session.sid, exc)


class _Client(discord.Client):
    """discord.py's `Client`, handing each `message` event to `take` as it is dispatched: discord.py runs every
    event handler as a task of its own, so an `on_message` handler made and ran a task for every message the bot
    saw, its own echoed back included. Listeners (`wait_for`) and handlers set with `client.event` run as before."""

    def __init__(self, take: Callable[[discord.Message], None], **options: Any) -> None:
        super().__init__(**options)
        self._take = take

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """discord.py's dispatch, after handing a `message` event's message to `take`."""
        if event == "message":
            self._take(args[0])
        super().dispatch(event, *args, **kwargs)


def _embed(data: dict[str, Any]) -> discord.Embed:
    """A `discord.Embed` from an embed dict: `title`, `description`, `url`, `color` (an int or "#rrggbb"), `image`
    (a URL), `footer`, `fields` (a list of {"name", "value", "inline"})."""
    color = data.get("color")
    if isinstance(color, str):
        try:
            color = int(color.lstrip("#"), 16)
        except ValueError:
            color = None
    embed = discord.Embed(
        title=data.get("title"),
        description=data.get("description"),
        url=data.get("url"),
        color=color if isinstance(color, int) else None,
    )
    if data.get("image"):
        embed.set_image(url=str(data["image"]))
    if data.get("footer"):
        embed.set_footer(text=str(data["footer"]))
    for item in data.get("fields") or ():
        if isinstance(item, dict) and item.get("name") and item.get("value"):
            embed.add_field(name=str(item["name"]), value=str(item["value"]), inline=bool(item.get("inline", False)))
    return embed

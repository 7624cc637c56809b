"""The built-in output tags: `<text>`, `<at>`, `<reply>`, `<img>`, `<record>`, `<video>`, `<emoji>`, `<poke>`,
`<file>`, `<sticker>` (KiraAI's, offered when `<data>/sticker/` holds stickers) and `<embed>` (a rich card, only
where the adapter names `embed` among its capabilities, as Discord does). Each request offers only the tags whose
element the adapter can send; media tags send only files under the operator's media directories
(`ctx.allowed_media_roots`), never hookchat's own data (`ctx.private_paths`), attachments a tool returned this turn,
or URLs the operator's policy allows (`ctx.media_policy`: public http(s) by default); `<at>` mentions everyone only
with the operator's consent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.chat.message_elements import (
    At,
    BaseMessageElement,
    Emoji,
    File,
    Image,
    Json,
    Poke,
    Record,
    Reply,
    Sticker,
    Text,
    Video,
)
from core.plugin import BasePlugin, NotSupportedHere, on, register
from core.tag import (
    BaseTag,
    MediaPathError,
    MediaURLError,
    current_event,
    find_attachment,
    is_mention_all,
    resolve_media_path,
)

#: The element type (as in `event.capabilities`) each built-in tag produces.
ELEMENT_TYPES: dict[str, str] = {
    "text": "text",
    "at": "at",
    "reply": "reply",
    "img": "image",
    "record": "record",
    "video": "video",
    "emoji": "emoji",
    "poke": "poke",
    "file": "file",
    "embed": "embed",
}
#: Capabilities that are not element types: offered only where an adapter names them, never by default.
_OPT_IN = frozenset({"embed"})


def _target(value: str, attrs: dict[str, str], *keys: str) -> tuple[str, str]:
    """What the tag points at (the first non-empty attribute of `keys`, else the value) and the text left over.

    `<at id="1">hello</at>` points at "1" and leaves "hello", which is sent as text after the element: words
    the model put inside a tag (or after an unclosed one) are never lost.
    """
    for key in keys:
        found = attrs.get(key, "").strip()
        if found:
            return found, value
    return value.strip(), ""


def _and_text(elements: list[BaseMessageElement], rest: str) -> list[BaseMessageElement]:
    return [*elements, Text(rest)] if rest.strip() else elements


#: The element types a tool returns as attachments.
_MEDIA = (Image, Record, File, Video, Sticker)


class StickerTag(BaseTag):
    """KiraAI's `<sticker>ID</sticker>`: a sticker of the operator's sticker folder, sent as a sticker where the
    platform has them and as a picture elsewhere; an unknown id is sent as its text."""

    name = "sticker"

    def __init__(self, stickers: Any, as_sticker: bool) -> None:
        listed = "".join(f"[{sid}] {entry['desc']}\n" for sid, entry in stickers.sticker_dict.items())
        super().__init__(
            description=f"send a sticker by its id, alone in its message: <sticker>ID</sticker>; "
            f"the stickers:\n{listed}"
        )
        self.stickers = stickers
        self.as_sticker = as_sticker

    async def handle(self, value: str, **attrs: Any) -> list[BaseMessageElement]:
        """The sticker's picture, or the id as text when there is no such sticker."""
        sticker_id = value.strip()
        path = self.stickers.path_of(sticker_id)
        if path is None:
            return [Text(value)] if value.strip() else []
        desc = self.stickers.sticker_dict[sticker_id]["desc"]
        if self.as_sticker:
            return [Sticker(path=str(path), name=path.name)]
        return [Image(path=str(path), name=path.name, caption=desc or None)]


class BuiltinTagsPlugin(BasePlugin):
    """The tags every bot has, withdrawn per request when the platform cannot send their element."""

    stickers: Any = None  # KiraAI's sticker manager, when an application runs

    async def initialize(self) -> None:
        """Read the sticker folder (off the event loop), when an application runs."""
        try:
            self.stickers = self.ctx.sticker_manager
            await self.stickers.init()
        except NotSupportedHere:
            self.stickers = None

    @on.llm_request()
    async def offer_supported_tags(self, event: Any, req: Any, tag_set: Any, *args: Any, **kwargs: Any) -> None:
        """Unregister this plugin's tags whose element type is not in `event.capabilities` (None: all but the
        opt-in `embed`)."""
        capabilities = getattr(event, "capabilities", None)
        stickers = self.stickers
        can_show = capabilities is None or "image" in capabilities or "sticker" in capabilities
        if stickers is not None and stickers.sticker_dict and can_show:
            tag_set.register(StickerTag(stickers, capabilities is None or "sticker" in capabilities))
        for name, element_type in ELEMENT_TYPES.items():
            supported = element_type in capabilities if capabilities is not None else element_type not in _OPT_IN
            if supported:
                continue
            tag = tag_set.get(name)
            mine = getattr(getattr(tag, "handler", None), "__self__", None) is self
            if mine:
                tag_set.unregister(name)

    @register.tag(name="text", description="plain text (bare text inside <msg> is text too): <text>Hello</text>")
    async def text_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """Plain text, kept exactly as written."""
        return [Text(value)] if value else []

    @register.tag(name="at", description='mention a user by id: <at id="USER_ID"/>')
    async def at_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A mention: `id` (or `user_id`) attribute, else the value."""
        user_id, rest = _target(value, attrs, "id", "user_id")
        if user_id and is_mention_all(user_id) and not self.ctx.media_policy.allow_mention_all:
            # Anyone who writes to the bot can ask the model for this: everyone is pinged only if the operator
            # consents ([media] allow_mention_all); otherwise the words stay, as text that pings nobody.
            self.logger.warning(
                "<at id=%r/> sent as text: mentioning everyone needs [media] allow_mention_all", user_id
            )
            return _and_text([Text(f"@{user_id.lstrip('@')}")], rest)
        return _and_text([At(user_id)] if user_id else [], rest)

    @register.tag(name="reply", description='quote a message by its id, first in the block: <reply id="MESSAGE_ID"/>')
    async def reply_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A quote of an earlier message: `id` (or `message_id`) attribute, else the value."""
        message_id, rest = _target(value, attrs, "id", "message_id")
        return _and_text([Reply(message_id)] if message_id else [], rest)

    @register.tag(name="emoji", description='send a platform emoji by id: <emoji id="EMOJI_ID"/>')
    async def emoji_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A platform emoji: `id` attribute, else the value."""
        emoji_id, rest = _target(value, attrs, "id")
        return _and_text([Emoji(emoji_id)] if emoji_id else [], rest)

    @register.tag(name="poke", description='poke (nudge) a user by id: <poke id="USER_ID"/>')
    async def poke_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A poke: `id` (or `user_id`) attribute, else the value."""
        user_id, rest = _target(value, attrs, "id", "user_id")
        return _and_text([Poke(user_id)] if user_id else [], rest)

    @register.tag(name="embed", description='a rich card: <embed title="TITLE" url="LINK" color="#5865F2">TEXT</embed>')
    async def embed_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A card (`Json({"embed": {...}})`): `title`, `url`, `color`, `image` and `footer` attributes, the value as
        its description."""
        card = {k: attrs[k].strip() for k in ("title", "url", "color", "image", "footer") if attrs.get(k, "").strip()}
        if value.strip():
            card["description"] = value.strip()
        return [Json({"embed": card})] if card else []

    @register.tag(name="img", description="send an image (a file path, https URL or tool attachment): <img>PATH</img>")
    async def img_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """An image from an http(s) URL, an attachment of this turn, or a file under the media directories."""
        source, rest = _target(value, attrs, "src", "url", "path")
        return _and_text(await self._media("img", Image, source, attrs), rest)

    @register.tag(
        name="record", description="send a voice message (a path, https URL or tool attachment): <record>PATH</record>"
    )
    async def record_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A voice recording from an http(s) URL, an attachment of this turn or a file under the media directories."""
        source, rest = _target(value, attrs, "src", "url", "path")
        return _and_text(await self._media("record", Record, source, attrs), rest)

    @register.tag(name="video", description="send a video (a path, https URL or tool attachment): <video>PATH</video>")
    async def video_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A video from an http(s) URL, an attachment of this turn or a file under the media directories."""
        source, rest = _target(value, attrs, "src", "url", "path")
        return _and_text(await self._media("video", Video, source, attrs), rest)

    @register.tag(
        name="file", description="send a file a tool returned (by its name), a path or an https URL: <file>NAME</file>"
    )
    async def file_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """An attachment of this turn (sent as the tool returned it), an http(s) URL, or a file under the media
        directories."""
        source, rest = _target(value, attrs, "src", "url", "path")
        if not source:  # <file name="report.pdf"/>
            source = attrs.get("name", "").strip()
        return _and_text(await self._media("file", File, source, attrs), rest)

    async def _media(self, tag: str, kind: type, source: str, attrs: dict[str, str]) -> list[BaseMessageElement]:
        """The element for `source`, or a short text saying it could not be sent (the reason is only logged)."""
        if not source:
            return []
        attachments = getattr(current_event(), "tool_attachments", None) or []
        attachment = find_attachment(source, attachments)
        if attachment is not None:
            if tag == "file" or isinstance(attachment, kind) or not isinstance(attachment, _MEDIA):
                return [attachment]
            return [
                kind(
                    url=attachment.url,
                    path=attachment.path,
                    base64=attachment.base64,
                    name=attachment.name,
                    mime=attachment.mime,
                )
            ]
        try:
            if source.lower().startswith(("http://", "https://")):
                # The platform, not hookchat, fetches it: from where the bot runs, so only where the operator lets
                # hookchat itself go (not the metadata service, the router or this machine's own ports).
                url = await self.ctx.media_policy.check_url(source)
                return [kind(url=str(url), name=attrs.get("name") or None)]
            path = await resolve_media_path(source, self.ctx.allowed_media_roots, self.ctx.private_paths)
        except (MediaPathError, MediaURLError) as exc:
            self.logger.warning("<%s> refused to send %r: %s", tag, source, exc)
            label = Path(source.replace("\\", "/").split("?", 1)[0]).name[:60] or "file"
            return [Text(f"[could not send {label}]")]
        return [kind(path=str(path), name=attrs.get("name") or path.name)]

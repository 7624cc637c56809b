"""The built-in output tags: `<text>`, `<at>`, `<reply>`, `<img>`, `<record>`, `<emoji>`, `<poke>`, `<file>` and
`<embed>` (a rich card, only where the adapter names `embed` among its capabilities, as Discord does).
Each request offers only the tags whose element the adapter can send; media tags send only files under the
operator's media directories (`ctx.allowed_media_roots`), never hookchat's own data (`ctx.private_paths`), or
attachments a tool returned this turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.chat.message_elements import At, BaseMessageElement, Emoji, File, Image, Json, Poke, Record, Reply, Text
from core.plugin import BasePlugin, on, register
from core.tag import MediaPathError, current_event, find_attachment, resolve_media_path

#: The element type (as in `event.capabilities`) each built-in tag produces.
ELEMENT_TYPES: dict[str, str] = {
    "text": "text",
    "at": "at",
    "reply": "reply",
    "img": "image",
    "record": "record",
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


class BuiltinTagsPlugin(BasePlugin):
    """The tags every bot has, withdrawn per request when the platform cannot send their element."""

    @on.llm_request()
    async def offer_supported_tags(self, event: Any, req: Any, tag_set: Any, *args: Any, **kwargs: Any) -> None:
        """Unregister this plugin's tags whose element type is not in `event.capabilities` (None: all but the
        opt-in `embed`)."""
        capabilities = getattr(event, "capabilities", None)
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
        if source.lower().startswith(("http://", "https://")):
            return _and_text([Image(url=source)], rest)
        return _and_text(await self._media("img", Image, source, attrs), rest)

    @register.tag(name="record", description="send a voice message (a path or tool attachment): <record>PATH</record>")
    async def record_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """A voice recording from an attachment of this turn or a file under the media directories."""
        source, rest = _target(value, attrs, "src", "path")
        return _and_text(await self._media("record", Record, source, attrs), rest)

    @register.tag(name="file", description="send a file a tool returned (by its name) or a path: <file>NAME</file>")
    async def file_tag(self, value: str, **attrs: str) -> list[BaseMessageElement]:
        """An attachment of this turn (sent as the tool returned it), or a file under the media directories."""
        source, rest = _target(value, attrs, "src", "path")
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
            if tag == "file" or isinstance(attachment, kind):
                return [attachment]
            return [kind(url=attachment.url, path=attachment.path, base64=attachment.base64, name=attachment.name,
                         mime=attachment.mime)]
        try:
            path = await resolve_media_path(source, self.ctx.allowed_media_roots, self.ctx.private_paths)
        except MediaPathError as exc:
            self.logger.warning("<%s> refused to send %r: %s", tag, source, exc)
            label = Path(source.replace("\\", "/")).name[:60] or "file"
            return [Text(f"[could not send {label}]")]
        return [kind(path=str(path), name=attrs.get("name") or path.name)]

"""OneBot v11 message segments and hookchat's message elements, both ways.

Incoming, every segment becomes an element (`text`, `at`, `reply`, `face`, `image`, `record`, `video`, `file`,
`forward`, `json`, `mface`); a type hookchat does not model is kept as the text of its CQ code, so nothing is lost.
Outgoing, a chain becomes one or more OneBot messages: QQ sends a voice, video, file or forward only on its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from core.adapter.onebot._cqcode import parse_cq, to_cq
from core.chat.message_elements import (
    At,
    BaseMessageElement,
    Emoji,
    File,
    Forward,
    Image,
    Json,
    MediaError,
    Record,
    Reply,
    Sticker,
    Text,
    Video,
)
from core.chat.message_utils import MessageChain

__all__ = ["Segment", "to_chain", "to_messages", "to_segments", "SOLO_TYPES"]

#: A segment of the array form: `{"type": "text", "data": {"text": "hi"}}`.
Segment = dict[str, Any]

#: Segment types QQ sends only as a message of their own; `to_messages` splits a chain around them.
SOLO_TYPES = frozenset({"record", "video", "file", "node"})

_MEDIA_SEGMENTS = {"image": Image, "record": Record, "video": Video, "file": File}


def to_chain(message: list[Segment] | str) -> MessageChain:
    """The elements of an incoming message in either form (segment array or CQ-code string)."""
    segments = parse_cq(message) if isinstance(message, str) else message
    return MessageChain(_element(segment) for segment in segments if isinstance(segment, dict))


def _element(segment: Segment) -> BaseMessageElement:
    kind = str(segment.get("type", ""))
    data = segment.get("data") or {}
    if kind == "text":
        return Text(str(data.get("text", "")))
    if kind == "at":
        return At(str(data.get("qq", "")), data.get("name") or None)
    if kind == "reply":
        return Reply(str(data.get("id", "")))
    if kind == "face":
        return Emoji(str(data.get("id", "")))
    if kind == "image" and str(data.get("sub_type", "0")) == "1":  # NapCat: an image sent as a sticker
        return _media(Sticker, data)
    if kind in _MEDIA_SEGMENTS:
        return _media(_MEDIA_SEGMENTS[kind], data)
    if kind == "mface":  # NapCat's market sticker
        return Sticker(url=data.get("url") or None, name=data.get("summary") or None)
    if kind == "forward":
        content = data.get("content")
        messages = (
            [list(to_chain(node.get("message") or [])) for node in content if isinstance(node, dict)]
            if isinstance(content, list)
            else []
        )
        return Forward(messages, id=str(data.get("id", "")))
    if kind == "json":
        raw = data.get("data", "")
        try:
            return Json(json.loads(raw) if isinstance(raw, str) else raw)
        except ValueError:
            return Json(raw)
    return Text(to_cq([{"type": kind, "data": data}]))


def _media(cls: type, data: dict[str, Any]) -> Any:
    file, url = str(data.get("file") or ""), str(data.get("url") or "")
    is_location = file.startswith(("http://", "https://", "base64://", "file://"))
    name = data.get("name") or data.get("file_name") or (file if file and not is_location else None)
    if file.startswith("base64://"):
        return cls(base64=file[len("base64://") :], name=name)
    if url:
        return cls(url=url, name=name)
    if file.startswith(("http://", "https://")):
        return cls(url=file, name=name)
    if file.startswith("file://"):
        return cls(path=unquote(urlparse(file).path), name=name or Path(unquote(urlparse(file).path)).name)
    return cls(name=name)  # only the implementation's cache name, which it accepts back as `file`


async def to_segments(chain: list[BaseMessageElement], *, self_id: str = "", nickname: str = "") -> list[Segment]:
    """The segments of an outgoing chain. Media given by path or base64 is sent inline (`base64://`), so an
    implementation on another machine can send it. `self_id` and `nickname` sign the nodes of a `Forward`.

    Raises `MediaError` for media with nothing to send. Elements no segment carries (`Notice`; `Poke`, which the
    adapter sends as an action) are sent as their text, so nothing a plugin put in a chain silently disappears.
    """
    segments: list[Segment] = []
    for element in chain:
        if isinstance(element, Text):
            segments.append({"type": "text", "data": {"text": element.text}})
        elif isinstance(element, At):
            segments.append({"type": "at", "data": {"qq": element.user_id}})
        elif isinstance(element, Reply):
            segments.append({"type": "reply", "data": {"id": element.message_id}})
        elif isinstance(element, Emoji):
            segments.append({"type": "face", "data": {"id": element.emoji_id}})
        elif isinstance(element, (Image, Sticker)):
            segments.append({"type": "image", "data": {"file": await _media_file(element)}})
        elif isinstance(element, (Record, Video)):
            segments.append({"type": element.type, "data": {"file": await _media_file(element)}})
        elif isinstance(element, File):
            data = {"file": await _media_file(element)}
            name = element.name or (Path(element.path).name if element.path else None)
            segments.append({"type": "file", "data": {**data, "name": name} if name else data})
        elif isinstance(element, Forward):
            segments.extend(await _forward_nodes(element, self_id, nickname))
        elif isinstance(element, Json):
            text = element.data if isinstance(element.data, str) else json.dumps(element.data, ensure_ascii=False)
            segments.append({"type": "json", "data": {"data": text}})
        else:
            segments.append({"type": "text", "data": {"text": element.repr_text()}})
    return segments


async def _forward_nodes(forward: Forward, self_id: str, nickname: str) -> list[Segment]:
    if not forward.messages and forward.id:
        return [{"type": "forward", "data": {"id": forward.id}}]
    return [
        {"type": "node", "data": {"user_id": self_id, "nickname": nickname, "content": await to_segments(message)}}
        for message in forward.messages
    ]


async def _media_file(element: Any) -> str:
    source = element.source
    if source == "url":
        return element.url
    if source == "data_url":
        return "base64://" + element.url.partition(",")[2]
    if source in ("base64", "path"):
        return "base64://" + await element.get_base64()
    if element.name:
        return element.name
    raise MediaError(f"{element.type} has nothing to send: give it a url, a path or base64")


def to_messages(segments: list[Segment]) -> list[list[Segment]]:
    """Split segments into the OneBot messages QQ accepts: each voice, video and file alone, the nodes of one
    forward together, everything else in order between them."""
    messages: list[list[Segment]] = []
    for segment in segments:
        kind = segment["type"]
        last = messages[-1] if messages else None
        joins = last is not None and (
            (kind == "node" and last[-1]["type"] == "node")
            or (kind not in SOLO_TYPES and last[-1]["type"] not in SOLO_TYPES)
        )
        if last is not None and joins:
            last.append(segment)
        else:
            messages.append([segment])
    return messages

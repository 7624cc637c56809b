"""The built-in tags plugin (core/builtins/builtin_tags), loaded by the plugin manager as any plugin: what each tag
sends, which tags a platform is offered, and that media tags never send a file outside the allowed directories."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from core.chat.message_elements import At, Emoji, File, Image, Poke, Record, Reply, Text, Video
from core.plugin import PluginLoader
from core.provider import LLMRequest, ToolResult
from core.tag import BaseTag, MediaPolicy, TagSet, parse_output
from core.testing import BUILTIN_PLUGINS_DIR

PLUGIN_DIR = BUILTIN_PLUGINS_DIR / "builtin_tags"
ALL_TAGS = ["text", "at", "reply", "img", "record", "video", "emoji", "poke", "file", "embed"]


class Event:
    """What the tags read from the turn's event: the adapter's capabilities and this turn's tool attachments."""

    def __init__(self, capabilities: frozenset[str] | None = None, tool_attachments: list[Any] = ()) -> None:
        self.is_stopped = False
        self.capabilities = capabilities
        self.tool_attachments = list(tool_attachments)


@pytest.fixture
def media(tmp_path: Path) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    (root / "cat.png").write_bytes(b"png")
    (root / "hello.ogg").write_bytes(b"ogg")
    (root / "notes.txt").write_text("notes")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", root / "escape.txt")
    return root


@pytest.fixture
async def manager(tmp_path: Path, media: Path):
    # example.com stands for a public host the operator named (the sandbox has no DNS); tests/security/
    # test_media_urls.py covers the policy itself.
    manager = PluginLoader(
        data_dir=tmp_path / "data",
        media_roots=[media],
        entry_points=False,
        media_policy=MediaPolicy.from_settings(allowed_url_hosts=["example.com"]),
    )
    manager.add_folder(PLUGIN_DIR)
    status = await manager.load("builtin_tags")
    assert status.state == "loaded", status
    yield manager
    await manager.shutdown()


@pytest.fixture
def tags(manager: PluginLoader) -> TagSet:
    """The request's tag set, as the agent loop builds it from the global registry."""
    return TagSet(manager.tags.active())


async def parse(text: str, tags: TagSet, event: Event | None = None) -> list:
    return await parse_output(text, tags, event or Event())


@pytest.mark.anyio
async def test_every_builtin_tag_is_registered(tags: TagSet) -> None:
    assert sorted(tags.names()) == sorted(ALL_TAGS)
    assert all(tag.owner == "builtin_tags" for tag in tags)
    prompt = tags.to_prompt()
    assert all(f"- <{name}>: " in prompt for name in ALL_TAGS)


@pytest.mark.anyio
async def test_simple_tags(tags: TagSet) -> None:
    output = (
        '<msg><reply id="m1"/><at id="42"/> hi <text>there</text><emoji id="14"/><poke user_id="42"/></msg>'
        "<msg><at>7</at><reply>m2</reply><emoji>5</emoji><poke>8</poke></msg>"
    )
    assert await parse(output, tags) == [
        [Reply("m1"), At("42"), Text(" hi "), Text("there"), Emoji("14"), Poke("42")],
        [At("7"), Reply("m2"), Emoji("5"), Poke("8")],
    ]


@pytest.mark.anyio
async def test_words_inside_an_id_tag_are_kept(tags: TagSet) -> None:
    # An unclosed <at id=...> takes the text up to the next tag; it is sent after the mention, not lost.
    assert await parse('<msg><at id="1">see you at eight</msg>', tags) == [[At("1"), Text("see you at eight")]]


@pytest.mark.anyio
async def test_img_from_url_root_and_attachment(tags: TagSet, media: Path) -> None:
    shot = Image(path="/elsewhere/shot.png")
    event = Event(tool_attachments=[shot, File(path="/elsewhere/chart.png", name="chart.png")])
    output = (
        "<msg><img>https://example.com/a.png</img><img src='cat.png'/>"
        f"<img>{media / 'cat.png'}</img><img>shot.png</img><img>chart.png</img></msg>"
    )
    real = str((media / "cat.png").resolve())
    assert await parse(output, tags, event) == [
        [
            Image(url="https://example.com/a.png"),
            Image(path=real, name="cat.png"),
            Image(path=real, name="cat.png"),
            shot,
            Image(path="/elsewhere/chart.png", name="chart.png"),
        ]
    ]


@pytest.mark.anyio
async def test_file_sends_an_attachment_by_name(tags: TagSet, media: Path) -> None:
    result = ToolResult(text="done", attachments=[File(path="/tool/out/r-1.pdf", name="report.pdf")])
    event = Event(tool_attachments=result.attachments)
    chains = await parse("<msg>Here: <file>report.pdf</file></msg>", tags, event)
    assert chains == [[Text("Here: "), result.attachments[0]]]
    notes = str((media / "notes.txt").resolve())
    assert await parse('<file name="n.txt">notes.txt</file>', tags) == [[File(path=notes, name="n.txt")]]
    assert await parse("<record>hello.ogg</record>", tags) == [
        [Record(path=str((media / "hello.ogg").resolve()), name="hello.ogg")]
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("tag", ["file", "img", "record"])
@pytest.mark.parametrize(
    "value",
    ["../secret.txt", "{tmp}/secret.txt", "escape.txt", "/etc/passwd", "file:///etc/passwd", "{media}/../secret.txt"],
)
async def test_traversal_is_refused(tags: TagSet, media: Path, caplog, tag: str, value: str) -> None:
    value = value.format(tmp=media.parent, media=media)
    with caplog.at_level(logging.WARNING):
        chains = await parse(f"<msg><{tag}>{value}</{tag}></msg>", tags)
    assert len(chains) == 1 and len(chains[0]) == 1
    sent = chains[0][0]
    assert isinstance(sent, Text) and sent.text.startswith("[could not send")
    assert "refused" in caplog.text


@pytest.mark.anyio
async def test_http_urls_pass_the_url_policy_for_every_media_tag(tags: TagSet) -> None:
    chains = await parse(
        "<msg><file>https://example.com/x.zip</file><video src='https://example.com/v.mp4'/></msg>", tags
    )
    assert chains == [[File(url="https://example.com/x.zip"), Video(url="https://example.com/v.mp4")]]
    assert await parse("<record>http://localhost:8780/api/sessions</record>", tags) == [
        [Text("[could not send sessions]")]
    ]


@pytest.mark.anyio
async def test_only_supported_tags_are_offered(manager: PluginLoader, tags: TagSet) -> None:
    class OtherPoke(BaseTag):
        name = "poke"

        async def handle(self, value, **kwargs):
            return [Text("another plugin's poke")]

    other = tags.register(OtherPoke)
    event = Event(capabilities=frozenset({"text", "at", "image"}))
    await manager.engine.dispatch("llm_request", event, LLMRequest(), tags)
    # this plugin's tags without an element the platform can send are gone; another plugin's tag is not touched
    assert sorted(tags.names()) == ["at", "img", "poke", "text"] and tags.get("poke") is other
    assert "<file>" not in tags.to_prompt()
    everything = TagSet(manager.tags.active())
    await manager.engine.dispatch("llm_request", Event(capabilities=None), LLMRequest(), everything)
    # no capabilities: every element type, but not the opt-in `embed`, which only an adapter naming it gets
    assert sorted(everything.names()) == sorted(t for t in ALL_TAGS if t != "embed")
    cards = TagSet(manager.tags.active())
    await manager.engine.dispatch("llm_request", Event(capabilities=frozenset({"text", "embed"})), LLMRequest(), cards)
    assert sorted(cards.names()) == ["embed", "text"]

"""Every OneBot segment type and every message element, both ways; outgoing segments are compared with what
nonebot's segment builders make for the same thing."""

from __future__ import annotations

import base64

import pytest
from nonebot.adapters.onebot.v11 import MessageSegment

from core.adapter.onebot import to_chain, to_cq, to_messages, to_segments
from core.chat.message_elements import (
    At,
    Emoji,
    File,
    Forward,
    Image,
    Json,
    MediaError,
    Notice,
    Poke,
    Record,
    Reply,
    Sticker,
    Text,
    Video,
)

pytestmark = pytest.mark.anyio

PNG = base64.b64encode(b"\x89PNG fake").decode()

INCOMING = [
    ({"type": "text", "data": {"text": "hi"}}, Text("hi")),
    ({"type": "at", "data": {"qq": 10001}}, At("10001")),
    ({"type": "at", "data": {"qq": "all"}}, At("all")),
    ({"type": "at", "data": {"qq": "10001", "name": "Alice"}}, At("10001", "Alice")),
    ({"type": "reply", "data": {"id": -2147483000}}, Reply("-2147483000")),
    ({"type": "face", "data": {"id": "178"}}, Emoji("178")),
    (
        {"type": "image", "data": {"file": "abc.jpg", "url": "https://multimedia.nt.qq.com.cn/x", "sub_type": 0}},
        Image(url="https://multimedia.nt.qq.com.cn/x", name="abc.jpg"),
    ),
    (
        {"type": "image", "data": {"file": "abc.gif", "url": "https://q/abc", "sub_type": 1, "summary": "[动画表情]"}},
        Sticker(url="https://q/abc", name="abc.gif"),
    ),
    ({"type": "image", "data": {"file": f"base64://{PNG}"}}, Image(base64=PNG)),
    ({"type": "image", "data": {"file": "file:///tmp/a%20b.png"}}, Image(path="/tmp/a b.png", name="a b.png")),
    ({"type": "image", "data": {"file": "http://x/1.jpg"}}, Image(url="http://x/1.jpg")),
    ({"type": "image", "data": {"file": "cache-name.image"}}, Image(name="cache-name.image")),
    ({"type": "record", "data": {"file": "v.amr", "url": "https://q/v"}}, Record(url="https://q/v", name="v.amr")),
    ({"type": "video", "data": {"file": "m.mp4", "url": "https://q/m"}}, Video(url="https://q/m", name="m.mp4")),
    (
        {"type": "file", "data": {"file": "report.pdf", "file_id": "/abc", "file_size": "12", "url": "https://q/f"}},
        File(url="https://q/f", name="report.pdf"),
    ),
    ({"type": "forward", "data": {"id": "7290000"}}, Forward(id="7290000")),
    (
        {
            "type": "forward",
            "data": {
                "id": "7",
                "content": [
                    {"message": [{"type": "text", "data": {"text": "one"}}]},
                    {"message": [{"type": "face", "data": {"id": "1"}}, {"type": "text", "data": {"text": "two"}}]},
                ],
            },
        },
        Forward([[Text("one")], [Emoji("1"), Text("two")]], id="7"),
    ),
    (
        {"type": "json", "data": {"data": '{"app":"com.tencent.miniapp","prompt":"[QQ小程序]"}'}},
        Json({"app": "com.tencent.miniapp", "prompt": "[QQ小程序]"}),
    ),
    ({"type": "json", "data": {"data": "{not json"}}, Json("{not json")),
    (
        {"type": "mface", "data": {"url": "https://q/s", "summary": "[开心]", "emoji_id": "1"}},
        Sticker(url="https://q/s", name="[开心]"),
    ),
    ({"type": "dice", "data": {"result": "3"}}, Text("[CQ:dice,result=3]")),
    (
        {"type": "share", "data": {"url": "http://x/?a=1&b=2", "title": "a,b"}},
        Text("[CQ:share,url=http://x/?a=1&amp;b=2,title=a&#44;b]"),
    ),
]


@pytest.mark.parametrize(("segment", "element"), INCOMING, ids=[s["type"] for s, _ in INCOMING])
def test_each_incoming_segment_becomes_its_element(segment, element):
    assert list(to_chain([segment])) == [element]


def test_the_string_form_reads_like_the_array_form():
    array = [
        {"type": "at", "data": {"qq": "10001"}},
        {"type": "text", "data": {"text": " [1] & more"}},
        {"type": "face", "data": {"id": "14"}},
        {"type": "image", "data": {"file": "http://x/1.jpg"}},
    ]
    assert to_chain("[CQ:at,qq=10001] &#91;1&#93; &amp; more[CQ:face,id=14][CQ:image,file=http://x/1.jpg]") == to_chain(
        array
    )


async def test_each_outgoing_element_is_the_segment_nonebot_builds(tmp_path):
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG fake")
    cases = [
        (Text("a [b], &c"), MessageSegment.text("a [b], &c")),
        (At("10001"), MessageSegment.at(10001)),
        (At("all"), MessageSegment.at("all")),
        (Reply("123"), MessageSegment.reply(123)),
        (Emoji("178"), MessageSegment.face(178)),
        (Image(url="https://x/1.jpg"), MessageSegment.image("https://x/1.jpg")),
        (Image(base64=PNG), MessageSegment.image(b"\x89PNG fake")),
        (Image(path=str(picture)), MessageSegment.image(b"\x89PNG fake")),  # inline: the peer may be elsewhere
        (Image(url=f"data:image/png;base64,{PNG}"), MessageSegment.image(b"\x89PNG fake")),
        (Sticker(url="https://x/s.gif"), MessageSegment.image("https://x/s.gif")),
        (Record(url="https://x/v.mp3"), MessageSegment.record("https://x/v.mp3")),
        (Video(base64=PNG), MessageSegment.video(b"\x89PNG fake")),
        (Json({"app": "x"}), MessageSegment.json('{"app": "x"}')),
    ]
    for element, built in cases:
        [segment] = await to_segments([element])
        assert segment["type"] == built.type, element
        expected = {k: v for k, v in built.data.items() if k in segment["data"]}
        assert segment["data"] == expected, element


async def test_a_file_keeps_its_name_and_a_forward_becomes_signed_nodes():
    [file] = await to_segments([File(url="https://x/r.pdf", name="report.pdf")])
    assert file == {"type": "file", "data": {"file": "https://x/r.pdf", "name": "report.pdf"}}
    nodes = await to_segments([Forward([[Text("one")], [Emoji("1")]])], self_id="42", nickname="Bot")
    built = [
        MessageSegment.node_custom(42, "Bot", [{"type": "text", "data": {"text": "one"}}]),
        MessageSegment.node_custom(42, "Bot", [{"type": "face", "data": {"id": "1"}}]),
    ]
    assert nodes == [{"type": s.type, "data": s.data} for s in built]
    by_id = MessageSegment.forward("99")  # a received bundle passed on by its id
    assert await to_segments([Forward(id="99")]) == [{"type": by_id.type, "data": by_id.data}]


async def test_what_onebot_cannot_send_goes_as_its_text_and_media_without_a_source_is_an_error():
    assert await to_segments([Poke("1"), Notice("x")]) == [
        {"type": "text", "data": {"text": "[Poke 1]"}},
        {"type": "text", "data": {"text": "[Notice x]"}},
    ]
    with pytest.raises(MediaError, match="image has nothing to send"):
        await to_segments([Image()])
    with pytest.raises(MediaError, match="cannot read image file"):
        await to_segments([Image(path="/nonexistent/cat.png")])


def test_voice_video_file_and_forward_each_go_as_a_message_of_their_own():
    t = {"type": "text", "data": {"text": "t"}}
    r = {"type": "record", "data": {"file": "v"}}
    f = {"type": "file", "data": {"file": "f"}}
    n = {"type": "node", "data": {"content": []}}
    assert to_messages([t, t]) == [[t, t]]
    assert to_messages([t, r, t, f, f, n, n, t]) == [[t], [r], [t], [f], [f], [n, n], [t]]
    assert to_messages([]) == []


async def test_the_string_form_of_a_chain():
    segments = await to_segments([At("1"), Text(" a,b [x]"), Emoji("2")])
    assert to_cq(segments) == "[CQ:at,qq=1] a,b &#91;x&#93;[CQ:face,id=2]"

"""CQ-code strings and their escapes, checked against the spec's own examples and, for any message, against
nonebot's parser and printer (written by others from the same spec)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nonebot.adapters.onebot.v11 import Message
from pydantic import TypeAdapter

from core.adapter.onebot import escape, parse_cq, to_cq, unescape
from tests.adapter.nonebot_models import nonebot_segments


def test_the_specs_escape_examples():
    assert escape("- [x] 使用 `&data` 获取地址") == "- &#91;x&#93; 使用 `&amp;data` 获取地址"
    assert escape("震惊,小伙睡觉前居然...", comma=True) == "震惊&#44;小伙睡觉前居然..."
    assert escape("a,b") == "a,b"  # plain text keeps its commas


def test_unescape_is_one_pass():
    assert unescape("&amp;#91;") == "&#91;"  # an escaped entity stays that entity's text
    assert unescape("&#91;x&#93; &amp; &#44;") == "[x] & ,"
    assert unescape("&unknown; & alone") == "&unknown; & alone"


def test_the_specs_cq_code_examples():
    assert parse_cq("[CQ:face,id=178]看看我刚拍的照片[CQ:image,file=123.jpg]") == [
        {"type": "face", "data": {"id": "178"}},
        {"type": "text", "data": {"text": "看看我刚拍的照片"}},
        {"type": "image", "data": {"file": "123.jpg"}},
    ]
    assert parse_cq("[CQ:share,title=标题中有=等号,url=http://baidu.com]") == [
        {"type": "share", "data": {"title": "标题中有=等号", "url": "http://baidu.com"}}
    ]
    assert parse_cq("[CQ:share,title=震惊&#44;小伙睡觉前居然...,url=http://baidu.com/?a=1&amp;b=2]") == [
        {"type": "share", "data": {"title": "震惊,小伙睡觉前居然...", "url": "http://baidu.com/?a=1&b=2"}}
    ]
    assert parse_cq("[CQ:shake]") == [{"type": "shake", "data": {}}]


def test_what_is_not_a_cq_code_stays_text():
    assert parse_cq("[CQ:at qq=1] [CQ: broken") == [{"type": "text", "data": {"text": "[CQ:at qq=1] [CQ: broken"}}]
    assert parse_cq("") == []


def test_printing_a_message():
    segments = [
        {"type": "text", "data": {"text": "a[1],&"}},
        {"type": "at", "data": {"qq": 10001000}},
        {"type": "share", "data": {"url": "http://x/?a=1&b=2", "title": "t,t", "content": None}},
    ]
    assert to_cq(segments) == "a&#91;1&#93;,&amp;[CQ:at,qq=10001000][CQ:share,url=http://x/?a=1&amp;b=2,title=t&#44;t]"


# Text and values that use every character the escapes are about.
_tricky = st.text(alphabet=st.sampled_from(list("ab ,=[]&;#9134CQ:\n中")), max_size=12)
_segment = st.one_of(
    st.builds(lambda t: {"type": "text", "data": {"text": t}}, _tricky.filter(bool)),
    st.builds(lambda i: {"type": "face", "data": {"id": str(i)}}, st.integers(0, 300)),
    st.builds(lambda q: {"type": "at", "data": {"qq": q}}, st.sampled_from(["all", "10001", "42"])),
    st.builds(lambda u, t: {"type": "share", "data": {"url": u, "title": t}}, _tricky, _tricky),
)


def _merged(segments):
    out = []
    for s in segments:
        if s["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {"type": "text", "data": {"text": out[-1]["data"]["text"] + s["data"]["text"]}}
        else:
            out.append(s)
    return out


@given(st.lists(_segment, max_size=6))
def test_any_message_prints_as_nonebot_prints_it_and_reads_back(segments):
    printed = to_cq(segments)
    assert printed == str(nonebot_message(segments))
    assert parse_cq(printed) == _merged(segments)


@given(st.text(alphabet=st.sampled_from(list("ab,=[]&;#9134CQ:")), max_size=30))
def test_any_string_reads_as_nonebot_reads_it(text):
    assert parse_cq(text) == nonebot_segments(text)


def nonebot_message(segments):
    return TypeAdapter(Message).validate_python(segments)


@pytest.mark.parametrize("text", ["&#91;CQ:at,qq=1&#93;", "[CQ:at,qq=1]"])
def test_escaped_codes_are_text_and_real_ones_are_codes(text):
    kinds = [s["type"] for s in parse_cq(text)]
    assert kinds == (["text"] if text.startswith("&") else ["at"])

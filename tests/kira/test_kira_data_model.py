"""KiraAI's data-model names, one test per name, from KiraAI's core/chat, core/tag, core/prompt_manager.py and
core/provider/llm_model.py: what a KiraAI plugin writes keeps meaning what it meant there."""

from __future__ import annotations

import base64
import copy
import http.server
import pickle
import threading
from pathlib import Path

import pytest

from core.chat import (
    AdapterInfo,
    Group,
    KiraIMMessage,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    Session,
    User,
)
from core.chat.message_elements import At, Image, MediaError, Poke, Text
from core.plugin import on
from core.plugin._decorators import HOOK_ATTR  # the marker is the thing under test here
from core.prompt_manager import Prompt, UserPrompt
from core.provider import LLMRequest
from core.tag import BaseTag, TagSet
from core.utils import path_utils

pytestmark = pytest.mark.anyio

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def kira_message(group: Group | None = None, **fields) -> KiraIMMessage:
    """A message built the way KiraAI's adapters build one: keywords, no session (the event derives it)."""
    return KiraIMMessage(
        chain=MessageChain([Text("hi")]),
        sender=User("u1", "Ann"),
        group=group,
        message_id="m1",
        timestamp=1.0,
        **fields,
    )


def test_is_group_message_on_messages_events_and_batches():
    info = AdapterInfo.named("qq")
    in_group = KiraMessageEvent(kira_message(Group("g1")), adapter=info)
    direct = KiraMessageEvent(kira_message(), adapter=info)

    assert in_group.is_group_message() and in_group.message.is_group_message()
    assert not direct.is_group_message()
    assert KiraMessageBatchEvent([in_group]).is_group_message()
    assert not KiraMessageBatchEvent([direct]).is_group_message()


def test_message_chain_message_list_is_the_chain_itself():
    chain = MessageChain([Text("a")])
    chain.message_list.append(Text("b"))

    assert chain.plain_text == "ab" and chain.message_list is chain
    chain.message_list = [Text("c")]
    assert chain == [Text("c")] and not chain.is_empty()
    assert MessageChain().is_empty()


def test_kira_im_message_self_id_and_is_notice_keywords():
    message = kira_message(self_id="10001", is_notice=True)

    assert message.self_id == "10001" and message.is_notice
    assert kira_message().self_id == "" and not kira_message().is_notice


def test_event_keywords_adapter_and_message_types_derive_the_session_as_kiraai_does():
    info = AdapterInfo(True, "qq-1", "qq", "QQ", "", {"self_id": "10001"})
    group_event = KiraMessageEvent(
        kira_message(Group("g1"), self_id="10001"), adapter=info, message_types=["text", "img"], timestamp=5
    )
    direct_event = KiraMessageEvent(kira_message(), adapter=info)

    assert group_event.session.sid == "qq:gm:g1" and direct_event.session.sid == "qq:dm:u1"
    assert group_event.adapter.platform == "QQ" and group_event.message_types == ["text", "img"]
    assert group_event.timestamp == 5 and group_event.self_id == "10001"
    batch = KiraMessageBatchEvent(
        message_types=["text"], timestamp=6, adapter=info, session=group_event.session, messages=[group_event.message]
    )
    assert batch.messages[0].chain == group_event.message.chain and batch.self_id == "10001"
    assert batch.message_types == ["text"] and batch.adapter is info
    with pytest.raises(TypeError, match="needs the event's adapter="):
        KiraMessageEvent(kira_message())


def test_prompt_persist_marks_a_request_only_part():
    kept, request_only = Prompt("said", name="message"), Prompt("reminder", name="r", persist=False)
    prompt = UserPrompt([kept, request_only])

    assert kept.persist and not request_only.persist
    assert prompt.text == "said\nreminder" and prompt.persisted_text == "said"
    assert request_only.to_string() == "reminder\n"


def test_a_prompt_is_built_compared_and_shown_as_the_dataclass_it_was():
    by_position = Prompt("Be brief.", "style", "p", {"k": 1}, False, "")
    by_keyword = Prompt(content="Be brief.", name="style", source="p", metadata={"k": 1}, persist=False, end="")

    assert by_position == by_keyword and by_position != Prompt("Be brief.", "style", "p")
    assert repr(Prompt("x", "n")) == "Prompt(content='x', name='n', source='', metadata={}, persist=True, end='\\n')"
    assert Prompt().metadata is not Prompt().metadata, "each prompt has a metadata dict of its own"
    match by_position:
        case Prompt("Be brief.", "style", source="p"):
            pass
        case _:
            pytest.fail("a prompt matches by position and by keyword")
    by_keyword.content = "Be briefer."
    assert by_keyword.content == "Be briefer." and str(by_keyword) == "Be briefer." and by_keyword != by_position
    assert copy.deepcopy(by_keyword) == by_keyword == pickle.loads(pickle.dumps(by_keyword))
    with pytest.raises(TypeError):
        hash(by_keyword)


def test_each_request_starts_with_an_empty_user_prompt_of_its_own():
    first, second = LLMRequest(), LLMRequest()

    assert first.user_prompt == [] and isinstance(first.user_prompt, UserPrompt)
    first.user_prompt.append("hi")
    assert second.user_prompt == [] and LLMRequest(user_prompt=["a", Prompt("b")]).user_prompt.text == "a\nb"


def test_user_prompt_is_a_list_of_prompts_and_still_reads_as_the_text():
    req = LLMRequest(user_prompt="[Ann] hi\n[Bob] yo")

    assert isinstance(req.user_prompt, list) and isinstance(req.user_prompt[0], Prompt)
    assert req.user_prompt == "[Ann] hi\n[Bob] yo" and str(req.user_prompt).startswith("[Ann]")
    assert req.user_prompt.splitlines() == ["[Ann] hi", "[Bob] yo"] and "Bob" in req.user_prompt
    req.user_prompt.append(Prompt("ctx", name="extra", source="p"))
    req.user_prompt += "more"
    assert [p.content for p in req.user_prompt] == ["[Ann] hi\n[Bob] yo", "ctx", "more"]
    assert req.to_openai_messages()[-1] == {"role": "user", "content": "[Ann] hi\n[Bob] yo\nctx\nmore"}
    req.user_prompt = "replaced"
    assert isinstance(req.user_prompt, UserPrompt) and req.user_prompt == "replaced"
    with pytest.raises(TypeError, match="holds Prompt objects"):
        req.user_prompt.append(42)


def test_image_image_keyword_tells_the_four_sources_apart(tmp_path):
    b64 = base64.b64encode(PIXEL).decode()

    assert Image(image="https://example.invalid/a.png").source == "url"
    assert Image(image=f"data:image/png;base64,{b64}").source == "data_url"
    assert Image(image=b64).base64 == b64
    assert Image(image=f"base64://{b64}").base64 == b64
    assert Image(image=str(tmp_path / "a.png")).path == str(tmp_path / "a.png")
    assert Image(image=f"file://{tmp_path}/b.png").path == f"{tmp_path}/b.png"
    assert Image(image="picture.png").path == "picture.png", "a bare file name is a path, not base64"
    assert Image(image=b64).image == b64
    with pytest.raises(TypeError, match="give the picture once"):
        Image(url="https://x", image="https://y")


def test_image_caption():
    assert Image(url="https://example.invalid/a.png", caption="a cat").caption == "a cat"
    assert Image(url="https://example.invalid/a.png").caption is None


async def test_image_to_path_writes_inline_pictures_once_and_keeps_a_path(tmp_path):
    path_utils.set_data_path(tmp_path)
    try:
        inline = Image(base64=base64.b64encode(PIXEL).decode(), mime="image/png")
        first = await inline.to_path()
        assert Path(first).read_bytes() == PIXEL and first.endswith(".png")
        assert first.startswith(str(tmp_path / "temp")) and await inline.to_path() == first
        local = tmp_path / "mine.png"
        local.write_bytes(PIXEL)
        assert await Image(path=str(local)).to_path() == str(local)
        with pytest.raises(MediaError):
            await Image().to_path()
    finally:
        path_utils.set_data_path(None)


async def test_image_to_path_downloads_a_url_from_a_real_server(tmp_path):
    class Serve(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/p.png" else 404)
            self.end_headers()
            if self.path == "/p.png":
                self.wfile.write(PIXEL)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path_utils.set_data_path(tmp_path)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        downloaded = await Image(url=f"{url}/p.png").to_path()
        assert Path(downloaded).read_bytes() == PIXEL and downloaded.endswith(".png")
        with pytest.raises(MediaError, match="cannot download"):
            await Image(url=f"{url}/missing.png").to_path()
    finally:
        path_utils.set_data_path(None)
        server.shutdown()
        thread.join()


def test_at_pid_is_the_user_id():
    mention = At("42", "Ann")

    assert mention.pid == "42" and At(pid=7).user_id == "7" and At(pid="all").pid == "all"
    mention.pid = 43
    assert mention.user_id == "43"
    assert Poke(pid=5).pid == "5"
    with pytest.raises(TypeError, match="needs the user's id"):
        At()


def test_message_str_on_the_messages_of_a_batch_is_what_the_model_reads():
    events = [
        KiraMessageEvent(KiraIMMessage(MessageChain([Text(t)]), User("u"), Session("t", "dm", "u")))
        for t in ("one", "two")
    ]
    batch = KiraMessageBatchEvent(events)

    assert [m.message_str for m in batch.messages] == ["one", "two"]
    batch.messages[0].message_str = "one, rewritten"
    assert (
        batch.messages[0].message_str == "one, rewritten" and batch.messages[0].message.message_str == "one, rewritten"
    )


def test_tag_set_get_all_and_get_all_root():
    class Inner(BaseTag):
        name = "inner"

    class Action(BaseTag):
        name = "action"
        parent = None  # KiraAI's way to declare a root tag

    tags = TagSet()
    tags.register(Inner(), Action())

    assert [t.name for t in tags.get_all()] == ["inner", "action"], "a root tag works inside <msg> too here"
    assert [t.name for t in tags.get_all_root()] == ["action"]


def test_after_xml_parse_form_is_read_off_the_hooks_signature():
    def whole(fn) -> bool:
        return getattr(on.after_xml_parse()(fn), HOOK_ATTR).whole_output

    async def seed(self, event, chain: MessageChain, *args, **kwargs): ...
    async def seed_unannotated(self, event, chain, *args, **kwargs): ...
    async def kira_list(self, event, chains: list[MessageChain], *args, **kwargs): ...
    async def kira_plural(self, event, actions, *args, **kwargs): ...
    async def kira_args(self, event, *args, **kwargs): ...

    assert not whole(seed) and not whole(seed_unannotated)
    assert whole(kira_list) and whole(kira_plural) and whole(kira_args)

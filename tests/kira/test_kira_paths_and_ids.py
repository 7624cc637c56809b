"""KiraAI's module paths, its web declarations (`register.page`, `register.api`, `PluginPage`, `PageMenu`) and its
plugin ids (any string), one test per name, from KiraAI's source and its plugin documentation."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from core.chat.message_elements import Image
from core.plugin import BasePlugin, PageMenu, PluginLoader, PluginPage, check_plugin_id, module_name_for, register
from core.provider import ModelInfo, ModelType
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


# -- module paths ----------------------------------------------------------------------------------------------


def test_core_agent_message_openai_message():
    from core.agent.message import OpenAIMessage
    from core.provider import LLMRequest

    message = OpenAIMessage(
        role="assistant",
        content="hi",
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    )
    assert message["content"] == "hi" and message.to_dict()["tool_calls"][0]["id"] == "c1"
    message["content"] = "changed"
    assert message.content == "changed"
    assert "reasoning_content" not in message.to_dict(), "empty fields are left out, as in KiraAI"
    assert LLMRequest(messages=[message]).to_openai_messages()[0]["content"] == "changed"
    with pytest.raises(KeyError):
        message["nope"]


def test_core_provider_llm_model_names():
    from core.provider import LLMRequest as Same
    from core.provider.llm_model import DYNAMIC_PROMPT_NAMES, LLMRequest

    assert LLMRequest is Same and DYNAMIC_PROMPT_NAMES == ("sessions", "chat_env", "time")


async def test_core_utils_path_utils_get_data_path_is_the_running_apps_data_dir(tmp_path):
    from core.utils.path_utils import get_data_path, set_data_path

    set_data_path(None)
    assert get_data_path() == Path.cwd().resolve() / "data"
    async with ChatHarness(provider=ScriptedProvider(), config={"data": {"dir": str(tmp_path / "bot")}}):
        assert get_data_path() == (tmp_path / "bot").resolve()
    set_data_path(None)


def test_core_adapter_adapter_utils_im_adapter_is_the_kiraai_interface():
    from core.adapter.adapter_info import AdapterInfo
    from core.adapter.adapter_utils import IMAdapter

    with pytest.raises(TypeError):
        IMAdapter(AdapterInfo.named("x"))  # abstract: send_group_message, send_direct_message, get_client
    assert {"send_group_message", "send_direct_message", "get_client"} <= IMAdapter.__abstractmethods__


async def test_core_utils_common_utils_desc_img_asks_the_model_with_the_picture_inline():
    from core.provider import LLMModelClient
    from core.utils.common_utils import desc_img

    provider = ScriptedProvider(["a red dot"])
    client = LLMModelClient(provider, ModelInfo(ModelType.LLM, "vision", "main", "main"))
    picture = Image(base64=base64.b64encode(b"\x89PNG\r\n\x1a\n").decode(), mime="image/png")

    assert await desc_img(client, picture, lang="en") == "a red dot"
    content = provider.requests[0].to_openai_messages()[0]["content"]
    assert content[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert content[1]["text"].startswith("Describe the content of this image")
    assert await desc_img(client, Image(), prompt="?") == "", "an unreadable picture gives no description"


# -- web declarations --------------------------------------------------------------------------------------------


def test_register_page_records_the_page_with_its_menu():
    class Pages(BasePlugin):
        @register.page("/dash", menu={"label": "Dash", "icon": "Box"})
        def dash(self):
            return PluginPage.from_html("<p>x</p>")

    (declaration,) = Pages.dash.__hookchat_web__
    assert (declaration.kind, declaration.path, declaration.auth) == ("page", "/dash", True)
    assert declaration.options["menu"] == PageMenu("Dash", "Box")
    with pytest.raises(ValueError, match="starting with '/'"):
        register.page("dash")


def test_register_api_records_method_path_and_route_options():
    decorate = register.api(method="post", path="/items", auth=False, summary="Create")

    async def create(self, name: str): ...

    (declaration,) = decorate(create).__hookchat_web__
    assert declaration.options == {"method": "POST", "route_options": {"summary": "Create"}} and not declaration.auth
    with pytest.raises(ValueError, match="method must be one of"):
        register.api(method="FETCH", path="/x")


def test_plugin_page_factories():
    assert PluginPage.from_folder("./web").source.value == "folder"
    assert PluginPage.from_url("https://example.invalid").source_value == "https://example.invalid"
    assert PluginPage.from_html("<h1/>").source.value == "html"


def test_page_menu_validates_like_kiraai():
    assert PageMenu({"zh": "仪表盘", "en": "Dashboard"}, order=10).dict() == {
        "label": {"zh": "仪表盘", "en": "Dashboard"},
        "icon": None,
        "order": 10,
    }
    with pytest.raises(ValueError):
        PageMenu("   ")
    with pytest.raises(TypeError):
        PageMenu("ok", order="first")


# -- plugin ids ------------------------------------------------------------------------------------------------


def test_any_string_is_a_plugin_id_but_dot_dot_and_paths():
    for good in ("default-chat（z）", "提醒", "has spaces", "a.b-c_d"):
        assert check_plugin_id(good) == good
    for bad in (".", "..", "", "a/b", "a\\b", "tab\there"):
        with pytest.raises(ValueError):
            check_plugin_id(bad)


def test_module_names_are_identifiers_and_never_collide():
    ids = ["a-b", "a.b", "a_b", "a b", "default-chat（z）", "default-chat（y）", "提醒", "1st"]
    names = [module_name_for(i) for i in ids]

    assert all(n.isidentifier() and n.isascii() for n in names)
    assert len(set(names)) == len(ids)
    assert module_name_for("plain_id") == "plain_id"


def write(root: Path, folder: str, plugin_id: str, answer: str) -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / "manifest.json").write_text(json.dumps({"plugin_id": plugin_id}), encoding="utf-8")
    (root / folder / "main.py").write_text(
        f"from core.plugin import BasePlugin\n\nclass P(BasePlugin):\n    answer = {answer!r}\n", encoding="utf-8"
    )


async def test_an_id_spelt_like_another_plugins_hashed_module_name_loads_beside_it(tmp_path):
    spelt_alike = module_name_for("a-b")  # an identifier: before, it was its own module name, and a-b's too
    write(tmp_path / "plugins", "one", "a-b", "dash")
    write(tmp_path / "plugins", "two", spelt_alike, "alike")
    loader = PluginLoader(plugin_dirs=[tmp_path / "plugins"], data_dir=tmp_path / "data", entry_points=False)
    try:
        await loader.load_all()
        assert loader.get_plugin("a-b").answer == "dash" and loader.get_plugin(spelt_alike).answer == "alike"
        assert module_name_for(spelt_alike) != spelt_alike
    finally:
        await loader.shutdown()


async def test_unicode_ids_load_side_by_side_and_show_as_written(tmp_path):
    write(tmp_path / "plugins", "one", "default-chat（z）", "z")
    write(tmp_path / "plugins", "two", "default-chat（y）", "y")
    write(tmp_path / "plugins", "three", "..", "never")
    loader = PluginLoader(plugin_dirs=[tmp_path / "plugins"], data_dir=tmp_path / "data", entry_points=False)
    try:
        await loader.load_all()
        assert (
            loader.get_plugin("default-chat（z）").answer == "z"
            and loader.get_plugin("default-chat（y）").answer == "y"
        )
        assert sorted(loader.loaded_ids()) == ["default-chat（y）", "default-chat（z）"]
        assert loader.get_plugin("default-chat（z）").ctx.get_plugin_data_dir().name == "default-chat（z）"
        refused = loader.status("three")
        assert refused.state == "error" and "names a directory of its own" in refused.reason
    finally:
        await loader.shutdown()

"""Mistakes a new plugin author makes, reported where they are made: a test harness whose plugin failed to load
raises with the plugin's error, and a tool whose function does not fit its JSON Schema fails at load, naming the
tool, the file and the fix."""

from __future__ import annotations

import json

import pytest

from core.app import SAVED_SETTINGS_NAME
from core.plugin import BasePlugin, PluginLoadError, on, register
from core.testing import ChatHarness

pytestmark = pytest.mark.anyio

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class TypoHook(BasePlugin):
    @on.im_message()
    async def greet(self):  # no event parameter
        pass


async def test_the_harness_raises_at_entry_with_the_plugins_load_error():
    with pytest.raises(PluginLoadError) as caught:
        async with ChatHarness(plugins=[TypoHook]):
            pytest.fail("the test body must not run against a bot without the plugin")
    message = str(caught.value)
    assert "typo_hook" in message and "cannot take the arguments of im_message" in message
    assert "allow_failed=True" in message

    async with ChatHarness(plugins=[TypoHook], allow_failed=True) as bot:
        assert bot.app.plugins.status("typo_hook").state == "error"


class WrongName(BasePlugin):
    @register.tool("weather", "Weather in a city", WEATHER)
    async def weather(self, event, *_, town: str) -> str:
        return town


class NotInSchema(BasePlugin):
    @register.tool("weather", "Weather in a city", WEATHER)
    async def weather(self, event, *_, city: str, country: str) -> str:
        return city


class NotRequired(BasePlugin):
    @register.tool("weather", "Weather in a city", {"type": "object", "properties": {"city": {"type": "string"}}})
    async def weather(self, event, *_, city: str) -> str:
        return city


class Fits(BasePlugin):
    @register.tool("weather", "Weather in a city", WEATHER)
    async def weather(self, event, *_, city: str, units: str = "metric") -> str:
        return city


@pytest.mark.parametrize(
    ("plugin", "plugin_id", "says"),
    [
        (WrongName, "wrong_name", ["the schema's property 'city' has no parameter", "add city to the function"]),
        (NotInSchema, "not_in_schema", ["'country' is not in its \"properties\"", "give the parameter a default"]),
    ],
)
async def test_a_tool_whose_function_does_not_fit_its_schema_fails_at_load(plugin, plugin_id, says):
    async with ChatHarness(plugins=[plugin], allow_failed=True) as bot:
        status = bot.app.plugins.status(plugin_id)
    assert status is not None and status.state == "error"
    assert "tool 'weather'" in status.reason and "test_author_errors.py:" in status.reason
    for words in says:
        assert words in status.reason, status.reason


async def test_a_tool_that_fits_its_schema_loads():
    async with ChatHarness(plugins=[Fits]) as bot:
        assert "weather" in bot.app.plugins.tools


async def test_a_parameter_the_schema_does_not_require_loads_with_a_warning_naming_the_fix(caplog):
    async with ChatHarness(plugins=[NotRequired]) as bot:
        assert "weather" in bot.app.plugins.tools
    assert "'city' is not in its \"required\"" in caplog.text and "give the parameter a default" in caplog.text


async def test_a_misspelt_plugin_setting_gets_did_you_mean():
    with pytest.raises(PluginLoadError, match=r"unknown config field 'quiet_second': did you mean 'quiet_seconds'\?"):
        async with ChatHarness(config={"plugins": {"config": {"chat": {"quiet_second": 2}}}}):
            pass


async def test_settings_saved_from_the_web_console_are_read_by_a_later_start_without_the_console(tmp_path):
    saved = tmp_path / SAVED_SETTINGS_NAME
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps({"chat": {"quiet_seconds": 7}}), encoding="utf-8")
    config = {"data": {"dir": str(tmp_path)}, "plugins": {"config": {"chat": {"quiet_seconds": 3}}}}

    async with ChatHarness(config=config) as bot:
        assert bot.plugin("chat").cfg["quiet_seconds"] == 7, "what was saved wins over hookchat.toml"

"""Provider types come from the `hookchat.providers` entry point group: an installed package adds one with a class
and an entry point, `type` in the config is checked against what is installed, and the type's own keys reach it
through `options`."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from core.app import build_provider
from core.config import ConfigError, HookchatConfig, installed_provider_types, load_config
from core.provider import LLMRequest

pytestmark = pytest.mark.anyio

ECHO_PROVIDER = """
    from core.provider import LLMProvider, LLMResponse


    class EchoProvider(LLMProvider):
        def __init__(self, *, prefix: str = "", name: str = "echo") -> None:
            self.prefix, self.name = prefix, name

        async def complete(self, req):
            return LLMResponse(text_response=self.prefix + str(req.user_prompt))


    NOT_A_PROVIDER = object()
"""


@pytest.fixture
def echo_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A distribution as pip installs it (its module and a `.dist-info` with `entry_points.txt`) on sys.path."""
    site = tmp_path / "site-packages"
    info = site / "echo_provider-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-provider\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[hookchat.providers]\necho = echo_provider:EchoProvider\nbroken = echo_provider:NOT_A_PROVIDER\n",
        encoding="utf-8",
    )
    (site / "echo_provider.py").write_text(textwrap.dedent(ECHO_PROVIDER), encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop("echo_provider", None)


def load(tmp_path: Path, text: str) -> HookchatConfig:
    path = tmp_path / "hookchat.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env={})


def test_hookchat_registers_its_own_types_like_any_package():
    assert {"openai", "local"} <= set(installed_provider_types())


async def test_an_installed_type_is_built_with_its_options(tmp_path, echo_installed):
    config = load(tmp_path, '[[providers]]\nname = "mine"\ntype = "echo"\noptions = { prefix = "echo: " }\n')
    provider = build_provider(config)
    assert provider.name == "mine"
    assert (await provider.complete(LLMRequest(user_prompt="hi"))).text_response == "echo: hi"


def test_an_unknown_type_names_the_key_and_the_installed_types(tmp_path, echo_installed):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, '[[providers]]\nname = "p"\ntype = "ehco"\n')
    [(key, reason)] = caught.value.issues
    assert key == "providers[0].type"
    assert reason == "unknown provider type 'ehco'; installed types: broken, echo, local, openai"


def test_options_of_a_builtin_type_are_refused(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, '[[providers]]\nname = "p"\ntype = "local"\noptions = { x = 1 }\n')
    assert "options: only for provider types of other packages" in caught.value.issues[0][1]


def test_an_entry_point_that_is_no_provider_is_named(tmp_path, echo_installed):
    config = load(tmp_path, '[[providers]]\nname = "p"\ntype = "broken"\n')
    with pytest.raises(ConfigError, match=r"'broken' \(echo_provider:NOT_A_PROVIDER\) is not an LLMProvider"):
        build_provider(config)


def test_a_package_installed_after_a_scan_is_found(tmp_path, monkeypatch):
    # The entry points are scanned once and reused (core/utils/entry_points.py): installing into a folder already
    # on sys.path must still be seen, as pip installs into site-packages while a bot runs.
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert "late" not in installed_provider_types()
    info = site / "late_provider-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: late-provider\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[hookchat.providers]\nlate = late_provider:Late\n", encoding="utf-8")
    assert "late" in installed_provider_types()

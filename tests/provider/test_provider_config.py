"""The `[[providers]]` table and `build_provider`: sampling keys and the embedded model's keys reach the provider
(and, for stop sequences, the real model), keys that cannot apply are refused by name, and an unset `api_key_env`
stops the start instead of failing every request."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.app import build_provider
from core.config import ConfigError, HookchatConfig, load_config
from core.provider import LLMRequest
from core.provider.local import LocalLlamaProvider
from core.provider.openai_provider import OpenAIProvider

pytestmark = pytest.mark.anyio


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> HookchatConfig:
    path = tmp_path / "hookchat.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env=env or {})


def test_the_embedded_model_takes_its_keys_and_the_sampling_keys(tmp_path):
    config = load(
        tmp_path,
        """
[[providers]]
name = "tiny"
type = "local"
model_path = "models/other.gguf"
context_tokens = 1024
threads = 2
temperature = 0.2
top_p = 0.9
max_tokens = 100
stop = ["\\n\\n", "User:"]
""",
    )
    provider = build_provider(config)
    assert isinstance(provider, LocalLlamaProvider) and provider.name == "tiny"
    assert provider.model_path == tmp_path / "models" / "other.gguf"  # relative to the config file
    assert (provider.context_tokens, provider.threads) == (1024, 2)
    assert (provider.temperature, provider.top_p, provider.max_tokens) == (0.2, 0.9, 100)
    assert provider.stop == ["\n\n", "User:"]
    assert provider.chat_template is None  # another model: its own chat template


def test_unset_keys_keep_the_providers_defaults(tmp_path):
    embedded = build_provider(load(tmp_path, '[[providers]]\nname = "local"\ntype = "local"\n'))
    default = LocalLlamaProvider()
    assert (embedded.context_tokens, embedded.threads, embedded.temperature, embedded.max_tokens, embedded.stop) == (
        default.context_tokens,
        default.threads,
        default.temperature,
        default.max_tokens,
        default.stop,
    )
    assert isinstance(build_provider(HookchatConfig()), LocalLlamaProvider)  # no [[providers]] at all


def test_an_openai_endpoint_takes_the_sampling_keys(tmp_path):
    config = load(
        tmp_path,
        """
[[providers]]
name = "api"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
temperature = 0.3
max_tokens = 50
top_p = 0.8
stop = ["END"]
""",
    )
    provider = build_provider(config)
    assert isinstance(provider, OpenAIProvider)
    assert (provider.temperature, provider.max_tokens) == (0.3, 50)
    assert provider.extra_body == {"top_p": 0.8, "stop": ["END"]}


@pytest.mark.parametrize(
    "table, key, reason",
    [
        (
            'type = "openai"\nmodels = ["m"]\ncontext_tokens = 4096',
            "providers[0]",
            'context_tokens: only for the embedded model (type = "local" without base_url)',
        ),
        (
            'type = "local"\nbase_url = "http://127.0.0.1:8080/v1"\nthreads = 2\nmodel_path = "m.gguf"',
            "providers[0]",
            "threads, model_path: only for the embedded model",
        ),
        (
            'type = "local"\ncontext_tokens = 512\nmax_tokens = 512',
            "providers[0]",
            "max_tokens (512) must be less than context_tokens (512)",
        ),
        ('type = "local"\ntemperature = 3', "providers[0].temperature", "less than or equal to 2"),
        ('type = "local"\ntop_p = 0', "providers[0].top_p", "greater than 0"),
        ('type = "local"\nthreads = 0', "providers[0].threads", "greater than 0"),
        ('type = "local"\nstop = [""]', "providers[0].stop[0]", "at least 1 character"),
        ('type = "local"\ncontext_size = 4096', "providers[0].context_size", "unknown key"),
    ],
)
def test_keys_that_cannot_apply_are_refused_by_name(tmp_path, table, key, reason):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f'[[providers]]\nname = "p"\n{table}\n')
    assert [k for k, _ in caught.value.issues] == [key]
    assert reason in caught.value.issues[0][1]


API = """
[[providers]]
name = "api"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
api_key_env = "MY_API_KEY"
"""


def test_an_unset_api_key_variable_stops_the_start_naming_it(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, API)
    assert caught.value.issues[0][0] == "providers[0].api_key_env"
    assert "the environment variable MY_API_KEY is not set" in str(caught.value)
    assert str(tmp_path / "hookchat.toml") in str(caught.value)
    assert load(tmp_path, API, {"MY_API_KEY": "sk-1"}).provider().api_key.get_secret_value() == "sk-1"
    assert load(tmp_path, API, {"HOOKCHAT_API_KEY": "sk-2"}).provider().api_key.get_secret_value() == "sk-2"


def test_only_the_provider_in_use_needs_its_key(tmp_path):
    config = load(tmp_path, 'default_provider = "local"\n[[providers]]\nname = "local"\ntype = "local"\n' + API)
    assert config.provider().name == "local"


@pytest.mark.slow
async def test_stop_sequences_reach_the_embedded_model(tmp_path, embedded_model):
    config = load(tmp_path, '[[providers]]\nname = "local"\ntype = "local"\nstop = [" "]\ntemperature = 0\n')
    provider = build_provider(config)
    try:
        resp = await provider.complete(LLMRequest(user_prompt="Write a long sentence about the sea."))
    finally:
        await provider.aclose()
    assert " " not in resp.text_response and resp.finish_reason == "stop"


@pytest.mark.slow
async def test_stop_sequences_reach_an_openai_compatible_server(tmp_path, model_server):
    config = load(
        tmp_path,
        f"""
[[providers]]
name = "server"
type = "local"
base_url = "{model_server.base_url}"
models = ["{model_server.model}"]
api_key_env = "SERVER_KEY"
stop = [" "]
temperature = 0
""",
        {"SERVER_KEY": model_server.api_key},
    )
    provider = build_provider(config)
    try:
        resp = await provider.complete(LLMRequest(user_prompt="Write a long sentence about the sea."))
    finally:
        await provider.aclose()
    assert " " not in resp.text_response and resp.finish_reason == "stop"

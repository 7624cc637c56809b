"""Loading the config file: defaults, the documented example, errors that name key and reason, env secrets."""

import re
from pathlib import Path

import pytest

from core.config import ConfigError, HookchatConfig, load_config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hookchat.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_gives_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(None, env={})
    assert config.data.dir == tmp_path / "data"
    assert config.data.history_path == tmp_path / "data" / "history.sqlite3"
    assert config.plugins.dirs == [tmp_path / "plugins", tmp_path / "data" / "plugins"]
    assert config.providers == [] and config.provider() is None  # the embedded local model
    assert (config.limits.max_concurrent_turns, config.limits.max_steps, config.limits.history_turns) == (64, 8, 50)
    assert config.limits.history_tokens is None
    assert (config.limits.tool_timeout, config.limits.max_tool_timeout) == (30, 300)
    assert (config.deadlines.hook_default, config.deadlines.stall_threshold) == (10, 0.1)
    assert config.adapters.console is True and config.adapters.instances == []
    assert (config.server.host, config.server.port, config.server.max_body_bytes) == ("127.0.0.1", 8765, 1 << 20)
    assert config.server.token is None
    assert config.media.allowed_dirs == []


def test_default_file_and_hookchat_config_variable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "[limits]\nmax_steps = 3\n")
    assert load_config(None, env={}).limits.max_steps == 3
    other = tmp_path / "other.toml"
    other.write_text("[limits]\nmax_steps = 4\n")
    assert load_config(None, env={"HOOKCHAT_CONFIG": str(other)}).limits.max_steps == 4


def test_an_explicit_file_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="config file not found") as err:
        load_config(tmp_path / "missing.toml", env={})
    assert str(tmp_path / "missing.toml") in str(err.value)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(None, env={"HOOKCHAT_CONFIG": str(tmp_path / "missing.toml")})


def test_the_documented_full_example_loads(tmp_path):
    example = re.search(r"## Full example.*?```toml\n(.*?)```", DOCS.read_text(), re.S).group(1)
    config = load_config(write(tmp_path, example), env={"OPENAI_API_KEY": "sk-test"})
    main = config.provider()
    assert main.name == "main" and main.models == ["gpt-4o-mini", "gpt-4o"]
    assert main.api_key.get_secret_value() == "sk-test"
    assert [p.type for p in config.providers] == ["openai", "local"]
    assert config.plugins.config["chat"] == {"debounce_seconds": 1.5, "max_messages": 5}
    assert not config.plugins.is_enabled("example_echo") and config.plugins.is_enabled("chat")
    assert config.adapters.instances[0].adapter_name == "qq"
    assert config.adapters.instances[0].options["url"] == "ws://127.0.0.1:3001"
    assert config.media.allowed_dirs == [tmp_path / "media"]


def test_relative_paths_resolve_against_the_file_directory(tmp_path, monkeypatch):
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    path = conf_dir / "hookchat.toml"
    path.write_text('[data]\ndir = "../state"\n[plugins]\ndirs = ["/opt/plugins", "~/plugins"]\n')
    config = load_config(path, env={})
    assert config.data.dir == tmp_path / "state"
    assert config.plugins.dirs == [Path("/opt/plugins"), Path.home() / "plugins"]
    assert config.media.allowed_dirs == []


@pytest.mark.parametrize(
    ("toml", "key", "reason"),
    [
        ("[limits]\nmax_steps = 0\n", "limits.max_steps", "Input should be greater than 0"),
        ("[limits]\nmax_steps = 'many'\n", "limits.max_steps", "Input should be a valid integer"),
        ("[limits]\nmax_tool_timeout = 301\n", "limits.max_tool_timeout", "less than or equal to 300"),
        ("[limits]\ntool_timeout = 60\nmax_tool_timeout = 50\n", "limits.tool_timeout", "must not exceed"),
        ("[server]\nport = 70000\n", "server.port", "less than or equal to 65535"),
        ("[plugins]\ndirs = 'plugins'\n", "plugins.dirs", "Input should be a valid list"),
        (
            "[[providers]]\nname = 'a'\ntype = 'gpt'\n",
            "providers[0].type",
            "unknown provider type 'gpt'; installed types: local, openai",
        ),
        ("[[providers]]\nname = 'a'\ntype = 'openai'\n", "providers[0].models", "needs at least one model"),
        ("[[providers]]\nname = 'a'\ntype = 'local'\nbase_url = 'localhost'\n", "providers[0].base_url", "http"),
        (
            "[[providers]]\nname = 'a'\ntype = 'local'\n[[providers]]\nname = 'a'\ntype = 'local'\n",
            "providers",
            "unique",
        ),
        (
            "[[providers]]\nname = 'a'\ntype = 'local'\napi_key_env = 'sk-123'\n",
            "providers[0].api_key_env",
            "should match pattern",
        ),
        (
            "default_provider = 'b'\n[[providers]]\nname = 'a'\ntype = 'local'\n",
            "default_provider",
            "'b' is not the name of a [[providers]] entry",
        ),
        ("[[adapters.instances]]\ntype = 'x'\n[[adapters.instances]]\ntype = 'x'\n", "adapters.instances", "unique"),
    ],
)
def test_invalid_values_name_the_file_key_and_reason(tmp_path, toml, key, reason):
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert f"{path}: {key}: " in str(err.value)
    assert reason in str(err.value)
    assert err.value.path == path
    assert [k for k, _ in err.value.issues] == [key]


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[limits]\nmax_stepz = 3\n", "limits.max_stepz"),
        ("colour = 'blue'\n", "colour"),
        ("[[providers]]\nname = 'a'\ntype = 'local'\nmodel = 'x'\n", "providers[0].model"),
    ],
)
def test_unknown_keys_are_rejected(tmp_path, toml, key):
    with pytest.raises(ConfigError, match=re.escape(f"{key}: unknown key")):
        load_config(write(tmp_path, toml), env={})


def test_every_problem_is_reported(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "[limits]\nmax_steps = 0\n[deadlines]\nhook_default = -1\n"), env={})
    assert [k for k, _ in err.value.issues] == ["limits.max_steps", "deadlines.hook_default"]
    assert len(str(err.value).splitlines()) == 2


def test_toml_syntax_error_names_file_line_and_column(tmp_path):
    path = write(tmp_path, "[limits]\nmax_steps = 3\n[data\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value).startswith(f"{path}:3:6: TOML syntax error: ")
    assert (err.value.line, err.value.column) == (3, 6)


PROVIDERS = """
default_provider = "second"
[[providers]]
name = "first"
type = "openai"
models = ["m"]
api_key_env = "FIRST_KEY"
api_key = "from-file"
[[providers]]
name = "second"
type = "openai"
models = ["m"]
"""


def test_secrets_come_from_the_environment(tmp_path):
    path = write(tmp_path, PROVIDERS)
    config = load_config(path, env={})
    assert config.providers[0].api_key.get_secret_value() == "from-file"
    assert config.providers[1].api_key is None

    env = {"FIRST_KEY": "from-env", "HOOKCHAT_API_KEY": "generic", "HOOKCHAT_SERVER_TOKEN": "tok"}
    config = load_config(path, env=env)
    assert config.providers[0].api_key.get_secret_value() == "from-env"  # api_key_env beats the file
    assert config.providers[1].api_key.get_secret_value() == "generic"  # the default provider only
    assert config.server.token.get_secret_value() == "tok"


def test_hookchat_api_key_never_reaches_a_provider_that_is_not_the_default(tmp_path):
    path = write(tmp_path, PROVIDERS.replace('default_provider = "second"', 'default_provider = "first"'))
    config = load_config(path, env={"HOOKCHAT_API_KEY": "generic"})
    assert config.providers[0].api_key.get_secret_value() == "from-file"
    assert config.providers[1].api_key is None


def test_server_token_variable_is_configurable(tmp_path):
    path = write(tmp_path, '[server]\ntoken_env = "MY_TOKEN"\n')
    config = load_config(path, env={"MY_TOKEN": "abc", "HOOKCHAT_SERVER_TOKEN": "other"})
    assert config.server.token.get_secret_value() == "abc"


def test_secrets_never_print(tmp_path):
    config = load_config(write(tmp_path, PROVIDERS), env={"HOOKCHAT_SERVER_TOKEN": "tok-secret"})
    for text in (repr(config), str(config), config.model_dump_json(), repr(config.providers[0])):
        assert "from-file" not in text and "tok-secret" not in text
    assert "**********" in repr(config)


def test_plugin_enabled_and_disabled_lists():
    plugins = HookchatConfig.model_validate({"plugins": {"enabled": ["a", "b"], "disabled": ["b"]}}).plugins
    assert [plugins.is_enabled(p) for p in ("a", "b", "c")] == [True, False, False]
    assert HookchatConfig().plugins.is_enabled("anything")

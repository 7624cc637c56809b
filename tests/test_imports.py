"""What importing hookchat costs: a plugin module (`core.plugin`) and a plugin's tests (`core.testing`) start without
the heavy machinery only some commands use, so `pytest` on a plugin and `hookchat --help` start at once. Each check
runs in a fresh interpreter, since this test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# What the serving, model and MCP commands need, and nothing else should pull in on import (start-up time).
HEAVY = (
    "openai",
    "starlette",
    "uvicorn",
    "nats",
    "xllamacpp",
    "opentelemetry",
    "PIL",
    "websockets",
    "watchfiles",
    "mcp",
    "aiogram",
    "discord",
    "nio",
)


def heavy_modules_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    return [name for name in HEAVY if name in json.loads(out.splitlines()[-1])]


@pytest.mark.parametrize("module", ["core.plugin", "core.testing", "core.chat", "core.provider", "core.app"])
def test_importing_the_plugin_api_loads_no_heavy_machinery(module):
    assert heavy_modules_after(f"import {module}") == []


def test_the_testing_kit_runs_a_turn_without_the_serving_machinery():
    statement = (
        "import anyio\n"
        "from core.testing import ChatHarness, ScriptedProvider\n"
        "async def turn():\n"
        "    async with ChatHarness(provider=ScriptedProvider(['<msg>hi</msg>'])) as bot:\n"
        "        [chain] = await bot.send('hello')\n"
        "        assert chain.plain_text == 'hi', chain\n"
        "anyio.run(turn)"
    )
    assert heavy_modules_after(statement) == []


# What loading the default plugins does not need: jsonschema and its reference resolver (a tool's or an entry's
# schema, or a config value the plain check cannot judge, imports them), `regex` (a schema's `pattern`), `packaging`
# (a manifest's `core_version`; the built-in plugins state none), `tomllib` (a config file; the folder has none), the
# agent loop and the output parser (the first turn), the Agent Skills (the `skills` plugin, loaded when the skills
# folder exists), and KiraAI's model clients and web declarations (a KiraAI plugin asking its provider manager for a
# client, or declaring a page, an endpoint or a widget).
NOT_FOR_LISTING = (
    "jsonschema",
    "referencing",
    "regex",
    "packaging",
    "tomllib",
    "core.provider.agent",
    "core.tag._parser",
    "core.mcp._skills",
    "core.provider.model_client",
    "core.plugin._web",
)


def test_listing_the_plugins_loads_no_heavy_machinery_nor_jsonschema(tmp_path):
    code = (
        "import io, json, sys, contextlib\n"
        "from core.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    code = main(['plugins'])\n"
        "assert code == 0 and 'chat' in out.getvalue(), out.getvalue()\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.splitlines()[-1])
    loaded = {*modules, *(m.split(".")[0] for m in modules)}
    assert [name for name in (*HEAVY, *NOT_FOR_LISTING) if name in loaded] == []

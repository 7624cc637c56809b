"""hookchat installed the way a user installs it: the wheel built from this tree, in a fresh virtual environment
outside the checkout, run from an empty folder. Its own plugins come with it (the chat answers), `hookchat plugins`
lists them, and `hookchat new-plugin` writes a plugin whose own test passes there.

The venv sees this environment's installed dependencies (a `.pth` line naming their folder; hookchat's own
editable install there is not activated by it), so that only hookchat itself is installed from the wheel
(`--no-deps`): what is tested is the wheel's content, not the package index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*cmd: str | Path, cwd: Path, stdin: str = "", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HOOKCHAT_CONFIG")}
    env["HOME"] = str(cwd)
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin` folder of a fresh venv holding hookchat from a wheel of this tree."""
    base = tmp_path_factory.mktemp("installed")
    wheels = base / "wheels"
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT, cwd=base)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("hookchat-*.whl")
    venv = base / "venv"
    made = run(sys.executable, "-m", "venv", venv, cwd=base)
    assert made.returncode == 0, made.stderr
    (site,) = (venv / "lib").glob("python*/site-packages")
    (site / "dependencies.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    pip = run(venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel, cwd=base)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    where = run(venv / "bin" / "python", "-c", "import core; print(core.__file__)", cwd=base)
    assert str(venv) in where.stdout, f"the installed copy must be the one used, not the checkout: {where.stdout}"
    return venv / "bin"


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_the_installed_package_has_its_own_plugins(installed, empty):
    out = run(installed / "hookchat", "plugins", "--json", cwd=empty)
    assert out.returncode == 0, out.stderr
    plugins = {p["plugin_id"]: p for p in json.loads(out.stdout)}
    assert {"builtin_tags", "chat", "commands"} <= set(plugins)
    assert all(p["state"] == "loaded" and str(ROOT) not in p["origin"] for p in plugins.values())


def test_a_new_plugins_own_test_passes_outside_the_checkout(installed, empty):
    out = run(installed / "hookchat", "new-plugin", "greeter", cwd=empty)
    assert out.returncode == 0, out.stderr
    test = run(
        installed / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "data/plugins/greeter/tests", cwd=empty
    )
    assert test.returncode == 0, test.stdout + test.stderr
    assert "1 passed" in test.stdout or "passed" in test.stdout


@pytest.mark.slow
def test_the_installed_chat_answers_on_the_embedded_model(installed, empty):
    pytest.importorskip("xllamacpp")
    out = run(installed / "hookchat", "chat", cwd=empty, stdin="Hello!\n/help\n/quit\n")
    assert out.returncode == 0, out.stderr
    assert "(no reply" not in out.stdout, out.stdout
    first = out.stdout.split("you> ")[1]
    assert first.startswith("bot> ") and len(first.strip()) > len("bot> "), out.stdout
    assert "bot> Commands: /help: list these commands; /reset:" in out.stdout, "the built-in commands answer /help"

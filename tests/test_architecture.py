"""The layers of docs/architecture.md, checked by import-linter: an import that runs the wrong way, reaches into
another package's `_private` module or closes a cycle inside a package fails this test, and so the build. The
contracts name no package by hand where a rule holds for all of them, so a package added tomorrow is covered."""

import shutil
import subprocess
import sys
import tomllib
from itertools import pairwise
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "import-linter is part of the test extra: pip install -e '.[test]'"
    # PYTHONPATH first, so that `core` is the tree's own copy and not the installed checkout.
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(tree)}
    return subprocess.run([lint, "--no-cache"], cwd=tree, capture_output=True, text=True, env=env)


def test_imports_follow_the_layers_respect_private_modules_and_form_no_cycles():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "BROKEN" not in run.stdout


def test_every_package_of_core_has_a_layer_and_every_layer_is_below_the_one_above_it_for_a_reason():
    (contract,) = [c for c in CONFIG["contracts"] if c["type"] == "layers"]
    layers = [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]
    graph = grimp.build_graph("core", cache_dir=None)
    for ignored in contract.get("ignore_imports", []):
        importer, imported = (name.strip() for name in ignored.split("->"))
        graph.remove_import(importer=importer, imported=imported)
    packages = {m for m in graph.modules if m.count(".") == 1}
    assert packages - {name for layer in layers for name in layer} == set(), "a package of core has no layer"

    def imports(upper: list[str], lower: list[str]) -> bool:
        return any(graph.direct_import_exists(importer=a, imported=b, as_packages=True) for a in upper for b in lower)

    # Adjacent layers no import runs between state an order nothing needs: they are one layer (docs/architecture.md).
    unforced = [(up, low) for up, low in pairwise(layers) if not imports(up, low)]
    assert unforced == []


def copy_of_the_tree(tmp_path: Path) -> Path:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        # core.cli may import anything by the layers, but not another package's private module
        ("core/cli.py", "import core.services._result", "only a package imports its own private modules"),
        # a package added the day of the test: its private module is just as private
        (
            "core/utils/clock.py",
            "from core.newpackage._inner import X",
            "only a package imports its own private modules",
        ),
        # _store imports _result: the other way round closes a cycle inside core.services
        ("core/services/_result.py", "import core.services._store", "no cycles between the modules of a package"),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(tmp_path, module, added, broken):
    tree = copy_of_the_tree(tmp_path)
    (tree / "core" / "newpackage").mkdir()
    (tree / "core" / "newpackage" / "__init__.py").write_text('"""A package added after the contracts."""\n')
    (tree / "core" / "newpackage" / "_inner.py").write_text('"""Its private module."""\n\nX = 1\n')
    path = tree / module
    path.write_text(path.read_text() + f"\n{added}\n")
    run = lint_imports(tree)
    assert run.returncode != 0
    assert f"{broken} BROKEN" in run.stdout, run.stdout

"""The layers of docs/architecture.md, checked by import-linter: an import that runs the wrong way (or reaches into
another package's `_private` module) fails this test, and so the build."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_imports_follow_the_layers_and_respect_private_modules():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "import-linter is part of the test extra: pip install -e '.[test]'"
    run = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "BROKEN" not in run.stdout

"""`core.tag` sits just above the chat data model: importing it loads no plugin, service or provider code, so the
parser stays usable (and testable) on its own and the layers keep running one way."""

from __future__ import annotations

import subprocess
import sys


def test_importing_core_tag_loads_nothing_above_core_chat() -> None:
    probe = "import sys, core.tag; print(' '.join(m for m in sys.modules if m.startswith('core.')))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    packages = {".".join(name.split(".")[:2]) for name in loaded}
    assert packages <= {"core.chat", "core.tag", "core.utils", "core.config", "core.prompt_manager"}, packages

"""`aioloader.checkpoint` is the only module that imports orbax, and says how to get it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_import_aioloader_imports_neither_jax_nor_orbax() -> None:
    done = run_python("import sys, aioloader; print(sorted({'jax', 'orbax'} & set(sys.modules)))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_orbax_the_import_names_the_extra() -> None:
    # A None entry in sys.modules makes `import orbax...` fail, as if it were not installed.
    done = run_python("import sys; sys.modules['orbax'] = None; import aioloader.checkpoint")
    assert done.returncode != 0
    assert "ImportError: aioloader.checkpoint needs orbax-checkpoint" in done.stderr
    assert "pip install 'aioloader[orbax]'" in done.stderr

"""The README's examples are the files in examples/, and they run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
QUICKSTARTS = ["quickstart.py", "quickstart_async.py", "quickstart_dataset.py"]


@pytest.mark.parametrize("name", QUICKSTARTS)
def test_the_readme_shows_the_example_as_it_is(name: str) -> None:
    readme = (REPO / "README.md").read_text()
    assert (REPO / "examples" / name).read_text().strip() in readme


@pytest.mark.parametrize("name", QUICKSTARTS)
def test_the_example_runs(name: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / name)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("62 batches of (32, 4)")

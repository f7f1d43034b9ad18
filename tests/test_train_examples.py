"""The examples run, train, checkpoint and resume (examples/train.py is also tested by test_kill_resume)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "orbax.checkpoint", reason="needs orbax-checkpoint, the `orbax` extra (it has no free-threaded wheels)"
)

REPO = Path(__file__).resolve().parent.parent


def run_example(name: str, *flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, str(REPO / "examples" / name), *flags]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_train_async_trains_next_to_other_tasks_and_resumes(tmp_path: Path) -> None:
    flags = ["--workdir", str(tmp_path), "--checkpoint-every", "10", "--log-every", "10"]
    first = run_example("train_async.py", "--steps", "20", *flags)
    assert "starting from step 0, training to step 20" in first
    assert "step     20  loss" in first
    assert "event loop:" in first
    second = run_example("train_async.py", "--steps", "30", *flags)
    assert "resumed at step 20, training to step 30" in second
    assert "step     30  loss" in second

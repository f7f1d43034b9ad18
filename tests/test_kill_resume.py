"""A training job killed with SIGKILL and started again trains as if it had never stopped.

The job (tests/support/train_job.py, which runs examples/train.py) checkpoints model
and loader with an orbax CheckpointManager every 5 steps and logs a
fingerprint of every batch and the exact loss. The test runs it once without
interruption, then again: paused mid-run at step 13, killed with SIGKILL,
restarted with another worker count; step for step, the batches and losses
must be those of the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "orbax.checkpoint", reason="needs orbax-checkpoint, the `orbax` extra (it has no free-threaded wheels)"
)

REPO = Path(__file__).resolve().parent.parent
STEPS, EVERY, PAUSE_AT = 30, 5, 13


def job(log: Path, workdir: Path, *flags: str) -> list[str]:
    train_flags = ["--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--workdir", str(workdir)]
    return [sys.executable, str(REPO / "tests" / "support" / "train_job.py"), str(log), *flags, *train_flags]


def run(command: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen[str]) -> str:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


def read_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def wait_for_pause(process: subprocess.Popen[str], log: Path) -> None:
    """Wait until the log says the job paused (polling the file: the job writes no other signal)."""
    deadline = time.monotonic() + 300
    while not (log.exists() and '"paused"' in log.read_text()):
        if process.poll() is not None:
            raise AssertionError(f"the job ended before pausing:\n{process.communicate()[0]}")
        assert time.monotonic() < deadline, "the job did not reach the pause"
        time.sleep(0.05)


@pytest.mark.slow
def test_killed_and_restarted_run_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    finish(run(job(tmp_path / "reference.jsonl", tmp_path / "reference")))
    reference = {line["step"]: line for line in read_log(tmp_path / "reference.jsonl")}
    assert sorted(reference) == list(range(1, STEPS + 1))

    log = tmp_path / "interrupted.jsonl"
    first = run(job(log, tmp_path / "interrupted", "--pause-at", str(PAUSE_AT)))
    wait_for_pause(first, log)
    first.kill()  # SIGKILL: no cleanup, no last checkpoint
    first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL
    output = finish(run(job(log, tmp_path / "interrupted", "--workers", "1")))

    lines = read_log(log)
    paused = lines.index({"paused": PAUSE_AT})
    before, after = lines[:paused], lines[paused + 1 :]
    assert [line["step"] for line in before] == list(range(1, PAUSE_AT + 1))
    restored = after[0]["step"] - 1
    assert f"resumed at step {restored}, training to step {STEPS}" in output
    assert restored in range(EVERY, PAUSE_AT + 1, EVERY)  # the last finished checkpoint
    assert [line["step"] for line in after] == list(range(restored + 1, STEPS + 1))
    for line in before + after:
        assert line == reference[line["step"]], f"step {line['step']} differs from the uninterrupted run"

"""A training job killed with SIGKILL and started again trains as if it had never stopped.

The job (tests/support/train_job.py, which runs examples/train.py) checkpoints model
and loader every 5 steps (with orbax, or with numpy where orbax does not install) and logs a
fingerprint of every batch and the exact loss. The test runs it once without
interruption, then again: paused mid-run at step 13, killed with SIGKILL,
restarted with another worker count; step for step, the batches and losses
must be those of the uninterrupted run.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.training import STEPS, job, read_log, run_to_end, started

EVERY, PAUSE_AT = 5, 13


def wait_for_pause(process: subprocess.Popen[str], log: Path) -> None:
    """Wait until the log says the job paused (polling the file: the job writes no other signal)."""
    deadline = time.monotonic() + 300
    while not (log.exists() and '"paused"' in log.read_text()):
        if process.poll() is not None:
            raise AssertionError(f"the job ended before pausing:\n{process.communicate()[0]}")
        assert time.monotonic() < deadline, "the job did not reach the pause"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(900)  # jobs that each start JAX: minutes on a busy machine
def test_killed_and_restarted_run_matches_an_uninterrupted_run(
    tmp_path: Path, uninterrupted_training: dict[int, dict[str, Any]]
) -> None:
    assert sorted(uninterrupted_training) == list(range(1, STEPS + 1))
    log = tmp_path / "interrupted.jsonl"
    with started(job(log, tmp_path / "interrupted", "--pause-at", str(PAUSE_AT), every=EVERY)) as first:
        wait_for_pause(first, log)
        first.kill()  # SIGKILL: no cleanup, no last checkpoint
        first.communicate(timeout=60)
        assert first.returncode == -signal.SIGKILL
    output = run_to_end(job(log, tmp_path / "interrupted", "--workers", "1", every=EVERY))

    lines = read_log(log)
    paused = lines.index({"paused": PAUSE_AT})
    before, after = lines[:paused], lines[paused + 1 :]
    assert [line["step"] for line in before] == list(range(1, PAUSE_AT + 1))
    restored = after[0]["step"] - 1
    assert f"resumed at step {restored}, training to step {STEPS}" in output
    assert restored in range(EVERY, PAUSE_AT + 1, EVERY)  # the last finished checkpoint
    assert [line["step"] for line in after] == list(range(restored + 1, STEPS + 1))
    for line in before + after:
        assert line == uninterrupted_training[line["step"]], (
            f"step {line['step']} differs from the uninterrupted run"
        )

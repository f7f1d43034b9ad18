"""The async training example trains next to other tasks, and a run of it cut in two gives,
step by step, the batches and losses of an uninterrupted run (of train.py: both examples
train alike). On every build: orbax checkpoints where orbax installs, numpy ones elsewhere.
examples/train.py itself is tested by test_kill_resume."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FREE_THREADED
from tests.support.training import STEPS, job, read_log, run_to_end

CUT = 20


def heartbeats(output: str) -> int:
    found = re.search(r"event loop: (\d+) heartbeats", output)
    assert found, output
    return int(found.group(1))


@pytest.mark.slow
@pytest.mark.timeout(900)  # jobs that each start JAX: minutes on a busy machine
def test_train_async_trains_next_to_other_tasks_and_resumes_exactly(
    tmp_path: Path, uninterrupted_training: dict[int, dict[str, Any]]
) -> None:
    log, workdir = tmp_path / "cut.jsonl", tmp_path / "run"
    first = run_to_end(
        [*job(log, workdir, "--async", every=10), "--steps", str(CUT)]
    )  # the last --steps wins
    second = run_to_end(job(log, workdir, "--async", every=10))

    assert f"starting from step 0, training to step {CUT}" in first
    assert f"resumed at step {CUT}, training to step {STEPS}" in second
    for output in (first, second):
        assert heartbeats(output) > 0, output  # the loop ran other tasks while the model trained
        assert "steps/s over" in output
    if FREE_THREADED and os.environ.get("PYTHON_GIL") == "0":
        assert "free-threaded, GIL off" in first
    resumed = read_log(log)
    assert [line["step"] for line in resumed] == list(range(1, STEPS + 1))
    for line in resumed:
        assert line == uninterrupted_training[line["step"]], (
            f"step {line['step']} differs from the uninterrupted run"
        )

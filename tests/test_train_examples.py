"""The async training example trains next to other tasks, and a run of it cut in two gives,
step by step, the batches and losses of an uninterrupted run (of train.py: both examples
train alike). On every build: orbax checkpoints where orbax installs, numpy ones elsewhere.
examples/train.py itself is tested by test_kill_resume."""

from __future__ import annotations

import os
import re
import sys
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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_prints_progress_the_loader_wait_share_and_the_step_time_ratio(tmp_path: Path) -> None:
    """Not a terminal: plain progress lines (no tqdm bar), then the bottleneck and the replay."""
    example = Path(__file__).resolve().parent.parent / "examples" / "train.py"
    output = run_to_end([sys.executable, str(example), "--steps", "30", "--workdir", str(tmp_path / "run")])
    assert re.search(r"progress: step 30, 30 batches, [\d,]+ records/s, loader wait \d+% of the loop", output)
    assert re.search(r"loader: bottleneck: \S+", output), output
    assert re.search(
        r"step time: [\d.]+ ms with the loader running, [\d.]+ ms on the same 20 batches held in memory "
        r"\(ratio [\d.]+\)",
        output,
    ), output
    assert "\r" not in output  # no progress bar when stdout is a pipe

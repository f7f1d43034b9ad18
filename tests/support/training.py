"""Running the training job (tests/support/train_job.py) from the tests: commands, processes, logs."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
STEPS = 30  # every run trains to this step


def job(log: Path, workdir: Path, *flags: str, every: int = 5, steps: int = STEPS) -> list[str]:
    """tests/support/train_job.py to step `steps`, checkpointing every `every` steps into `workdir`,
    logging each step's batch and loss to `log`; `flags` go to the job (--async, --pause-at)."""
    train_flags = ["--steps", str(steps), "--checkpoint-every", str(every), "--workdir", str(workdir)]
    return [sys.executable, str(REPO / "tests" / "support" / "train_job.py"), str(log), *flags, *train_flags]


@contextlib.contextmanager
def started(command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """`command` running, stdout and stderr together; killed on the way out if still running,
    so that a failing test leaves no job behind."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def finish(process: subprocess.Popen[str]) -> str:
    """Its output, once it ended well."""
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


def run_to_end(command: list[str]) -> str:
    with started(command) as process:
        return finish(process)


def read_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]

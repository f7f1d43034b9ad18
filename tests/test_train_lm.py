"""examples/train_lm.py: mix two corpora, pack, batch, train a tiny JAX model, checkpoint, resume.

A run stopped at a checkpoint and started again sees exactly the batches of a run that
never stopped, and its losses are those of that run, with orbax checkpoints (where orbax
is installed) and with the NumPy files used without it.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax")

from examples import train_lm

REPO = Path(__file__).resolve().parent.parent
SMALL = train_lm.Config(steps=8, checkpoint_every=4, log_every=4, batch_size=4, seq_len=32, width=16)


def run(config: train_lm.Config) -> list[tuple[int, str, float]]:
    """(step, batch fingerprint, loss) for each step the run trains."""
    seen: list[tuple[int, str, float]] = []

    def on_step(step: int, batch: Any, loss: Any) -> None:
        seen.append((step, train_lm.fingerprint(batch), float(loss)))

    train_lm.train(config, on_step)
    return seen


SAVERS = ["orbax", "numpy"] if train_lm.ocp is not None else ["numpy"]


@pytest.mark.slow
@pytest.mark.parametrize("saver", SAVERS)
def test_a_resumed_run_sees_the_batches_and_losses_of_an_uninterrupted_one(
    saver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if saver == "numpy":
        monkeypatch.setattr(train_lm, "ocp", None)
    whole = run(dataclasses.replace(SMALL, workdir=tmp_path / "whole", workers=2))
    first = run(dataclasses.replace(SMALL, workdir=tmp_path / "resumed", steps=4, workers=0))
    second = run(dataclasses.replace(SMALL, workdir=tmp_path / "resumed", workers=3))
    assert [step for step, _, _ in whole] == list(range(1, 9))
    assert first + second == whole
    assert len({fingerprint for _, fingerprint, _ in whole}) == 8  # the data moves on


@pytest.mark.slow
def test_the_example_runs_and_resumes_from_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    flags = ["--workdir", str(tmp_path), "--checkpoint-every", "3", "--log-every", "3", "--seq-len", "32"]

    def example(*more: str) -> str:
        command = [sys.executable, str(REPO / "examples" / "train_lm.py"), *flags, *more]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "starting from step 0, training to step 3" in example("--steps", "3")
    output = example("--steps", "5", "--workers", "1")
    assert "resumed at step 3, training to step 5" in output
    assert "step     5  loss" in output

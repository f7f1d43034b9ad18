"""`python -m aioloader.report`: the summary of a saved snapshot, or of a user's loader run for
N outputs, naming the stage made slow on purpose; clear errors for what it cannot use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aioloader
from aioloader import LoaderStatistics

REPO = Path(__file__).resolve().parent.parent

PIPELINE = textwrap.dedent(
    """
    import time
    import aioloader

    class Plus(aioloader.MapTransform):
        def map(self, x):
            return x + 1

    class Slow(aioloader.MapTransform):
        def map(self, x):
            time.sleep(0.002)
            return x * 2

    def make_loader():
        return aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, 10_000, 1),
            sampler=aioloader.IndexSampler(10_000, shuffle=False, num_epochs=1),
            operations=[Plus(), Slow(), aioloader.Batch(4)],
            worker_count=2,
        )

    not_a_function = 3
    """
)


def report(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "aioloader.report", *args]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


def test_a_loader_run_for_n_batches_names_the_slow_stage(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text(PIPELINE)
    done = report("pipeline:make_loader", "--batches", "30", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "bottleneck: operations[1] (Slow.map): " in done.stdout
    assert "raise `worker_count` (now 2)" in done.stdout


def test_json_of_a_run_then_its_summary_from_the_file(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text(PIPELINE)
    done = report("pipeline:make_loader", "--batches", "10", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    statistics = LoaderStatistics.from_json(done.stdout)
    # Ten batches taken (the consumer counts a chunk's outputs once all are), 40 records sampled.
    assert 1 <= statistics.stage("consumer").items <= 10
    assert statistics.stage("sampling").items >= 10 * 4
    (tmp_path / "saved.json").write_text(done.stdout)
    again = report("saved.json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == statistics.summary() + "\n"


def test_to_json_and_from_json_give_the_same_snapshot() -> None:
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 50, 1),
        sampler=aioloader.IndexSampler(50, num_epochs=1),
        operations=[aioloader.Batch(5)],
        worker_count=1,
    )
    with iter(loader) as iterator:
        for _ in iterator:
            pass
        statistics = iterator.statistics()
    assert LoaderStatistics.from_json(statistics.to_json()) == statistics


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("missing.json", "missing.json: [Errno 2]"),
        ("garbage.json", "not the JSON of LoaderStatistics.to_json()"),
        ("pipeline:nowhere", "has no attribute 'nowhere'"),
        ("pipeline:not_a_function", "'not_a_function' is not a function, got 3"),
        ("no_such_module:make", "No module named 'no_such_module'"),
    ],
)
def test_what_cannot_be_used_is_named(tmp_path: Path, target: str, message: str) -> None:
    (tmp_path / "pipeline.py").write_text(PIPELINE)
    (tmp_path / "garbage.json").write_text('{"stages": 3}')
    done = report(target, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"aioloader.report: {target}: " in done.stderr
    assert message in done.stderr


def test_a_function_that_returns_no_loader_is_refused(tmp_path: Path) -> None:
    (tmp_path / "listing.py").write_text("def make():\n    return [1, 2, 3]\n")
    done = report("listing:make", cwd=tmp_path)
    assert done.returncode == 2
    assert "must return a DataLoader" in done.stderr
    assert "[1, 2, 3]" in done.stderr

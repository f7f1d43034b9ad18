"""A soak: reads that wait and fail at random, loaders stopped and resumed, for minutes.

Outside the default run (marker `soak`); run it with

    ./dev test -m soak tests/test_soak.py          (AIOLOADER_SOAK_SECONDS=150 by default)

Each round takes one of the contract pipelines over a source whose reads wait
a random while and now and then raise. An error stops the loader (it must
arrive in output order, naming the record); a fresh loader, with another
worker count, resumes from the state after the last output delivered. Now and
then a loader is also closed, dropped or left half-way, and a fresh one
resumes. Every output delivered, across all the loaders of a round, must be
the reference evaluator's, in order: nothing lost, repeated or changed.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioloader import DataLoader, ReadOptions
from tests.conftest import FREE_THREADED, aioloader_threads
from tests.support.outputs import notes
from tests.support.reference import CASES, Case, assert_same_outputs, canonical, reference_outputs

pytestmark = pytest.mark.soak

SECONDS = float(os.environ.get("AIOLOADER_SOAK_SECONDS", "150"))
PIPELINES = [case for case in CASES if case.name not in ("out-of-order", "out-of-order-tail")]


class Injected(OSError):
    """The error the flaky source raises."""


class FlakySource:
    """Records 0..n-1; each read waits up to `delay` (a long wait now and then) and
    fails with probability `failure_rate`, whatever the key: a retry may succeed."""

    def __init__(self, size: int, seed: int, delay: float, failure_rate: float) -> None:
        self.size, self.delay, self.failure_rate = size, delay, failure_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        with self._lock:
            wait = self._rng.random() * self.delay
            if self._rng.random() < 0.002:
                wait = 0.05  # a read that waits far longer than the others
            fails = self._rng.random() < self.failure_rate
        if wait > 0.0002:
            time.sleep(wait)
        if fails:
            raise Injected(f"injected failure reading key {key}")
        return key


@dataclass
class Round:
    """One pipeline taken to its end across as many loaders as it takes."""

    case: Case
    rng: random.Random
    wanted: list[Any] = field(default_factory=list)
    got: list[Any] = field(default_factory=list)
    state: dict[str, Any] | None = None
    loaders: int = 0
    errors: int = 0

    def loader(self) -> DataLoader:
        rng = self.rng
        self.loaders += 1
        return DataLoader(
            data_source=FlakySource(
                self.case.num_records, rng.randrange(2**32), rng.choice([0.0, 0.0005, 0.002]), 0.004
            ),
            sampler=self.case.sampler(),
            operations=self.case.make_operations(),
            worker_count=rng.choice([0, 1, 2, 3, 5]),
            read_options=rng.choice(
                [None, ReadOptions(num_threads=4, prefetch_buffer_size=8), ReadOptions(num_threads=1)]
            ),
        )

    def take(self, output: Any) -> None:
        at = len(self.got)
        assert at < len(self.wanted), "an output past the end"
        assert canonical(output) == canonical(self.wanted[at]), f"{self.case.name}: output {at} differs"
        self.got.append(output)

    def failed(self, error: BaseException) -> None:
        assert isinstance(error, Injected), f"{type(error).__name__}: {error}"
        assert "reading from FlakySource failed on the record with index=" in notes(error)
        self.errors += 1


def run_sync(round_: Round) -> None:
    """One loader: to the end, to an error, or stopped half-way (closed or dropped)."""
    iterator = iter(round_.loader())
    if round_.state is not None:
        iterator.set_state(round_.state)
    stop_after = round_.rng.choice([None, None, round_.rng.randrange(1, 40)])
    try:
        for count, output in enumerate(iterator, 1):
            round_.take(output)
            if count == stop_after:
                break
    except Exception as error:
        round_.failed(error)
    round_.state = iterator.get_state()
    if round_.rng.random() < 0.5:
        iterator.close()
    del iterator  # else dropped: the finalizer stops it


async def run_async(round_: Round) -> None:
    iterator = aiter(round_.loader())
    if round_.state is not None:
        iterator.set_state(round_.state)
    stop_after = round_.rng.choice([None, round_.rng.randrange(1, 40)])
    count = 0
    try:
        async for output in iterator:
            round_.take(output)
            count += 1
            if count == stop_after:
                break
    except Exception as error:
        round_.failed(error)
    round_.state = iterator.get_state()
    await iterator.aclose()


@pytest.mark.timeout(SECONDS + 300)
def test_soak() -> None:
    rng = random.Random(int(os.environ.get("AIOLOADER_SOAK_SEED", "0")))
    deadline = time.monotonic() + SECONDS
    rounds = loaders = errors = delivered = 0
    while time.monotonic() < deadline:
        case = rng.choice(PIPELINES)
        round_ = Round(case, random.Random(rng.randrange(2**32)))
        round_.wanted = reference_outputs(range(case.num_records), case.sampler(), case.make_operations())
        while len(round_.got) < len(round_.wanted):
            before = len(round_.got)
            if round_.rng.random() < 0.25:
                asyncio.run(run_async(round_))
            else:
                run_sync(round_)
            assert round_.loaders < 10 * len(round_.wanted) + 50, f"{case.name}: no progress"
            assert len(round_.got) >= before
        assert_same_outputs(round_.got, round_.wanted)
        rounds, loaders = rounds + 1, loaders + round_.loaders
        errors, delivered = errors + round_.errors, delivered + len(round_.got)
    deadline = time.monotonic() + 2
    while aioloader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    build = "free-threaded" if FREE_THREADED else "GIL"
    print(
        f"\nsoak ({build}): {rounds} rounds, {loaders} loaders, {errors} injected errors, {delivered} outputs"
    )
    assert rounds > 0
    assert errors > 0

"""The first batch made in parts by several threads at once (`_scheduling/first_batch`).

The output, the errors, the states and the statistics are those of the
batch made whole; at most `worker_count` threads run the user's code at
once; a close while the parts run stops them.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader._operations.transforms import Batch
from aioloader._program.jobs import ChunkJob, Elements
from aioloader._program.program import Stage
from aioloader._scheduling.first_batch import PARTS_PER_THREAD, FirstBatch
from tests.conftest import repeated, wait_for_no_threads
from tests.support.outputs import assert_same, drain, notes, states_at_every_output


class Meet(aioloader.MapTransform):
    """Records `meeting` wait for each other: only as many threads at once get past them."""

    def __init__(self, meeting: set[int]) -> None:
        self.meeting = meeting
        self.barrier = threading.Barrier(len(meeting), timeout=30)
        self.threads: set[str] = set()

    def __deepcopy__(self, memo: dict[int, Any]) -> Meet:
        return self  # one barrier and one set for every thread

    def map(self, x: int) -> int:
        self.threads.add(threading.current_thread().name)
        if x in self.meeting:
            self.barrier.wait()
        return x


@repeated
@pytest.mark.parametrize("workers", [2, 3])
def test_two_threads_make_the_first_batch_together(workers: int, repeat: int) -> None:
    """The first records of the first two parts wait for each other: made on one thread,
    the first would wait at the barrier for the second until it broke."""
    parts = FirstBatch(ChunkJob(0, 16), FirstBatch.parts(ChunkJob(0, 16), workers), Batch(16), workers)
    meet = Meet({work.payload.start for work in list(parts.todo)[:2]})
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 64),
        sampler=aioloader.SequentialSampler(64),
        operations=[meet, aioloader.Batch(16)],
        worker_count=workers,
    )
    with iter(loader) as iterator:
        assert next(iterator).tolist() == list(range(16))
    assert len(meet.threads) >= 2


class Noisy(aioloader.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> dict[str, Any]:
        return {"x": np.int64(x), "noise": rng.integers(1 << 30, size=3)}


class Scale(aioloader.RandomMapTransform):
    """After `Batch`: the batch's generator (its last record's)."""

    def random_map(self, batch: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return {**batch, "scale": rng.random()}


class FailsAt(aioloader.MapTransform):
    def __init__(self, bad: int) -> None:
        self.bad = bad

    def map(self, x: int) -> int:
        if x == self.bad:
            raise ValueError(f"record {x} is bad")
        return x


def loader(operations: list[Any], workers: int, records: int = 100) -> aioloader.DataLoader:
    return aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, records),
        sampler=aioloader.IndexSampler(records, shuffle=True, seed=3, num_epochs=1),
        operations=operations,
        worker_count=workers,
    )


PIPELINES = {
    "random-before-and-after": lambda: [Noisy(), aioloader.Batch(12), Scale()],
    "batch-fn": lambda: [lambda x: x * 3, aioloader.Batch(10, batch_fn=lambda xs: sorted(xs))],
    "short-data": lambda: [lambda x: x + 1, aioloader.Batch(500)],
    "short-data-drop": lambda: [lambda x: x + 1, aioloader.Batch(500, drop_remainder=True)],
}


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.parametrize("workers", [2, 4])
def test_outputs_and_states_are_those_of_the_batch_made_whole(name: str, workers: int) -> None:
    whole = list(loader(PIPELINES[name](), 0))
    parts = list(loader(PIPELINES[name](), workers))
    assert len(parts) == len(whole)
    for mine, theirs in zip(parts, whole, strict=True):
        assert_same(mine, theirs)
    count = min(len(whole), 3)
    assert states_at_every_output(loader(PIPELINES[name](), workers), count) == states_at_every_output(
        loader(PIPELINES[name](), 0), count
    )


@pytest.mark.parametrize("workers", [2, 3])
def test_an_error_in_any_part_comes_as_the_whole_batch_gives_it(workers: int) -> None:
    """Shuffled, so the bad record lies in each part in turn; no output comes before it,
    and the error names the same record."""
    keys = aioloader.IndexSampler(100, shuffle=True, seed=3, num_epochs=1)
    for position in range(12):
        bad = keys[position].record_key
        got, error = drain(loader([FailsAt(bad), aioloader.Batch(12)], workers))
        want, expected = drain(loader([FailsAt(bad), aioloader.Batch(12)], 0))
        assert got == want == []
        assert type(error) is type(expected) is ValueError
        assert str(error) == str(expected)
        assert notes(error) == notes(expected)
        assert f"index={position}, record_key={bad}" in notes(error)


def plus_one(x: int) -> int:
    return x + 1


def test_statistics_count_the_first_batch_as_one() -> None:
    with iter(loader([plus_one, aioloader.Batch(10)], 2)) as iterator:
        batches = list(iterator)
        statistics = iterator.statistics()
    assert len(batches) == 10
    assert statistics.stage("read").items == 100
    assert statistics.stage("operations[0] (plus_one)").items == 100
    assert statistics.stage("batch").items == 10
    assert statistics.stage("batch").calls >= 2  # the first batch's join, then the chunks after


class Held(aioloader.MapTransform):
    """Every record waits until the test lets it go, and says when one is waiting."""

    def __init__(self) -> None:
        self.waiting, self.go = threading.Event(), threading.Event()

    def __deepcopy__(self, memo: dict[int, Any]) -> Held:
        return self

    def map(self, x: int) -> int:
        self.waiting.set()
        self.go.wait(30)
        return x


@repeated
def test_a_close_from_another_thread_while_parts_run_stops_them(repeat: int) -> None:
    held = Held()
    iterator = iter(loader([held, aioloader.Batch(16)], 2))
    answers: list[Any] = []
    consumer = threading.Thread(target=lambda: answers.append(next(iterator, "ended")))
    consumer.start()
    assert held.waiting.wait(30)
    # States to reach, not times: the engine is made (its workers may run a part before
    # it is), then the close has stopped its scheduler.
    while (engine := iterator._cursor.holder.engine) is None:
        threading.Event().wait(0.001)
    closer = threading.Thread(target=iterator.close)
    closer.start()
    while True:
        with engine.scheduler._lock:
            if engine.scheduler._closed:
                break
        threading.Event().wait(0.001)
    held.go.set()  # the records in progress end; no part starts after the close
    closer.join(30)
    consumer.join(30)
    assert answers == ["ended"]  # released earlier, the batch could have come before the close
    assert not wait_for_no_threads(2.0)


def test_parts_cover_the_chunk_in_order_and_at_most_threads_run_at_once() -> None:
    first = FirstBatch(ChunkJob(40, 10), 4, Batch(10), threads=2)
    taken = [first.take(), first.take()]
    assert first.take() is None  # two threads run parts already
    assert all(work is not None and work.stage is Stage.PARTS for work in taken)
    jobs = [work.payload for work in taken if work is not None]
    jobs += [work.payload for work in first.todo]
    assert [(job.start, job.count) for job in jobs] == [(40, 3), (43, 3), (46, 2), (48, 2)]


def test_a_first_chunk_is_cut_only_on_a_fresh_start_and_for_two_workers_or_more() -> None:
    assert FirstBatch.parts(ChunkJob(0, 32), 1) == 1
    assert FirstBatch.parts(ChunkJob(0, 32), 2) == 2 * PARTS_PER_THREAD
    assert FirstBatch.parts(ChunkJob(0, 3), 4) == 3  # a part holds one record at least
    assert FirstBatch.parts(ChunkJob(0, 32, skip=1), 4) == 1  # resumed inside a record
    assert FirstBatch.parts(ChunkJob(0, 32, skip_outputs=1), 4) == 1  # ... or inside a batch


def test_the_join_takes_no_part_after_a_failed_one() -> None:
    first = FirstBatch(ChunkJob(0, 4), 2, Batch(4), threads=2)
    works = [first.take(), first.take()]
    failure: Any = object()  # what a part's elements carry when a record failed
    failed = Elements([1], [(0, 0, 0)], [(1, 0, 0)], [0], [None], failure)
    for work, elements in zip(works, [failed, Elements([3, 4], [], [], [], [], None)], strict=True):
        assert work is not None
        work.payload = elements
        assert first.done(work) is None
    join = first.take()
    assert join is not None
    assert join.stage is Stage.JOIN
    assert join.payload.failure is failure
    assert join.payload.plan.groups == []  # the record before the failure makes no batch


def test_a_failed_part_is_joined_without_the_parts_after_it() -> None:
    """Part 0 fails while part 1 runs: the join comes at once, the parts not taken are
    dropped (their records come after the failing one), and part 1, done later, is ignored."""
    first = FirstBatch(ChunkJob(0, 8), 4, Batch(8), threads=2)
    part0, part1 = first.take(), first.take()
    assert part0 is not None
    assert part1 is not None
    failure: Any = object()
    part0.payload = Elements([0], [(0, 0, 0)], [(1, 0, 0)], [0], [None], failure)
    assert first.done(part0) is None
    join = first.take()
    assert join is not None
    assert join.stage is Stage.JOIN
    assert join.payload.failure is failure
    assert not first.todo  # parts 2 and 3 dropped
    part1.payload = Elements([2, 3], [], [], [], [], None)
    assert first.done(part1) is None  # too late to matter
    assert not first.todo


class RaisesAt(aioloader.MapTransform):
    def __init__(self, bad: int, error: type[BaseException]) -> None:
        self.bad, self.error = bad, error

    def map(self, x: int) -> int:
        if x == self.bad:
            raise self.error(f"record {x}")
        return x


@repeated
@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, StopIteration])
@pytest.mark.parametrize("bad", [0, 7])  # in the first part, and in the last
def test_what_user_code_raises_in_a_part_ends_the_loader_as_from_the_whole_batch(
    error: type[BaseException], bad: int, repeat: int
) -> None:
    """KeyboardInterrupt and SystemExit stop the loader as they are, whichever thread's
    part raised them; a StopIteration is an error of that record (see `_common/calls`)."""
    sampler = aioloader.SequentialSampler(32)
    outcomes = []
    for workers in (0, 2):
        loader = aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, 32),
            sampler=sampler,
            operations=[RaisesAt(bad, error), aioloader.Batch(8)],
            worker_count=workers,
        )
        got, caught = drain(loader, BaseException)
        outcomes.append((got, type(caught), str(caught)))
        assert not wait_for_no_threads(2.0)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == []
    assert outcomes[0][1] is (RuntimeError if error is StopIteration else error)

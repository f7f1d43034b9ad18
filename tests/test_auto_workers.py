"""`worker_count="auto"`: the batches of `worker_count=0`, with workers added while the consumer
waits, and none beyond the memory bound."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader._executors.autoscale import default_maximum
from tests.conftest import aioloader_threads, repeated

N = 600


class Sleepy(aioloader.MapTransform):
    """Waits as a decode that releases the GIL would: more workers help."""

    def map(self, x: int) -> int:
        time.sleep(0.002)  # long enough that a second worker is clearly faster, on a busy machine too
        return x * 3


class Odd(aioloader.FilterTransform):
    def filter(self, x: int) -> bool:
        return x % 2 == 1


class Noise(aioloader.RandomMapTransform):
    def random_map(self, x: Any, rng: np.random.Generator) -> Any:
        return x + rng.integers(100)


def loader(workers: int | str, first: Any = None, batch_size: int = 6, **kwargs: Any) -> aioloader.DataLoader:
    """`first` (default `Sleepy()`), then the same random, filter and batch operations."""
    return aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, N, 1),
        sampler=aioloader.IndexSampler(N, shuffle=True, num_epochs=1, seed=5),
        operations=[first or Sleepy(), Noise(), Odd(), aioloader.Batch(batch_size)],
        worker_count=workers,
        **kwargs,
    )


class InPairs(aioloader.MapTransform):
    """Records go fast two at a time: a record waits up to 50 ms for another thread to be in
    here too. One thread alone takes 50 ms a record, two take 2 ms: a second worker
    is many times faster, whatever else the machine is doing (the tuner measures, so a
    small gain on a loaded machine could be lost in its noise; and on a loaded machine a
    thread may wait 10 ms and more for a core, which a shorter wait would count as alone)."""

    def __init__(self) -> None:
        self.gate = threading.Barrier(2)

    def __deepcopy__(self, memo: dict[int, Any]) -> InPairs:
        return self  # one gate for every thread

    def map(self, x: int) -> int:
        try:
            self.gate.wait(timeout=0.05)
        except threading.BrokenBarrierError:
            self.gate.reset()
        time.sleep(0.002)  # two workers then take a few phases to finish, not one trial's
        return x * 3


@repeated
def test_auto_gives_the_batches_of_worker_count_0_and_adds_workers(repeat: int) -> None:
    # Batches of 2 (about 4 records, 0.2 s at one worker): the first phase ends within a second.
    expected = [batch.tolist() for batch in loader(0, batch_size=2)]
    counts: list[int] = []
    found = []
    with iter(loader("auto", InPairs(), batch_size=2)) as iterator:
        for batch in iterator:
            found.append(batch.tolist())
            counts.append(iterator.statistics().worker_count)
    assert found == expected
    assert all(0 <= count <= default_maximum() for count in counts)  # 0: the consumer's thread
    if default_maximum() > 1:
        # At one worker 30 s, at two a fraction of that: a trial of two comes in the first second.
        assert max(counts) > 1, counts


class Uncopyable(Sleepy):
    """Holds what cannot be copied for a worker (a lock, a client): worker_count=0 runs it."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError("cannot pickle '_thread.lock' object")


@pytest.mark.parametrize("prefetch", [False, True], ids=["", "start_prefetch"])
def test_auto_keeps_operations_that_cannot_be_copied_in_the_consumers_thread(prefetch: bool) -> None:
    # They once failed in the middle of the run, when a trial first started a worker: at a
    # point that timing chose, where worker_count=0 delivers every batch. With
    # `start_prefetch()`, "auto" starts a worker to fill the pipeline: not for these.
    expected = [batch.tolist() for batch in loader(0, Uncopyable())]
    with iter(loader("auto", Uncopyable())) as iterator:
        if prefetch:
            iterator.start_prefetch()
        found = [batch.tolist() for batch in iterator]
        assert iterator.statistics().worker_count == 0
    assert found == expected
    with pytest.raises(TypeError, match=r"`operations\[0\]` \(Uncopyable.map\) cannot be deep-copied"):
        list(loader(2, Uncopyable()))


def test_auto_goes_on_with_the_threads_it_has_when_the_system_refuses_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A limit on threads or memory: `Thread.start` raised from the tuner's trial of a first
    worker, and `next()` with it, at a point that timing chose, where `worker_count=0`
    delivers every batch (a review, 2026-11-30, with a real `RLIMIT_AS`)."""
    expected = [batch.tolist() for batch in loader(0, batch_size=2)]
    start, refused = threading.Thread.start, []

    def refuse_workers(thread: threading.Thread) -> None:
        if thread.name.startswith("aioloader-worker"):
            refused.append(thread.name)
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_workers)
    with iter(loader("auto", batch_size=2)) as iterator:
        found = [batch.tolist() for batch in iterator]
        assert iterator.statistics().worker_count == 0
    assert found == expected
    assert refused  # the tuner tried: records that wait, where the consumer waits all the time


def test_auto_with_for_starts_on_the_consumers_thread() -> None:
    """No worker thread before the first batch: with `for`, "auto" starts at level 0."""
    with iter(loader("auto", Noise())) as iterator:
        next(iterator)
        assert iterator.statistics().worker_count == 0
        assert [t.name for t in aioloader_threads() if "worker" in t.name] == []


@pytest.mark.asyncio
async def test_auto_with_async_for_gives_the_same_batches() -> None:
    expected = [batch.tolist() for batch in loader(0)]
    assert [batch.tolist() async for batch in loader("auto")] == expected


def test_no_worker_is_added_above_the_memory_bound() -> None:
    iterator = iter(loader("auto", memory_limit_bytes=1))
    counts = [iterator.statistics().worker_count for _ in iterator]
    assert set(counts) <= {0, 1}  # the one worker it starts with, or the consumer's thread


def test_resume_with_auto_continues_where_a_fixed_count_stopped() -> None:
    fixed = iter(loader(2))
    head = [next(fixed).tolist() for _ in range(7)]
    state = fixed.get_state()
    fixed.close()
    resumed = iter(loader("auto"))
    resumed.set_state(state)
    assert head + [batch.tolist() for batch in resumed] == [batch.tolist() for batch in loader(0)]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"worker_count": "many"},
            ValueError,
            "`worker_count` must be an int, None or \"auto\", got 'many'.",
        ),
        ({"worker_count": 257}, ValueError, "`worker_count` must be at most 256"),
        ({"worker_count": -1}, ValueError, "`worker_count` must be greater than or equal to 0, got -1."),
        ({"worker_count": 1.5}, TypeError, "`worker_count` must be an int"),
        ({"worker_count": None, "memory_limit_bytes": 1 << 30}, ValueError, "worker_count=None"),
        (
            {"worker_count": "auto", "memory_limit_bytes": 0},
            ValueError,
            "`memory_limit_bytes` must be greater",
        ),
        (
            {"worker_count": "auto", "memory_limit_bytes": 1.5},
            TypeError,
            "`memory_limit_bytes` must be an int",
        ),
        ({"worker_count": 2, "memory_limit_bytes": 1 << 30}, ValueError, 'bounds `worker_count="auto"`'),
    ],
)
def test_bad_auto_arguments_are_named(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as raised:
        aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, 4, 1), sampler=aioloader.IndexSampler(4), **kwargs
        )
    assert message in str(raised.value)


class SlowReads:
    """A storage-like source: each read waits 2 ms, as a network read would."""

    def __len__(self) -> int:
        return SLOW_N

    def __getitem__(self, key: int) -> int:
        time.sleep(0.002)
        return key * 7


SLOW_N = 400


def slow_loader(workers: int | str, **kwargs: Any) -> aioloader.DataLoader:
    return aioloader.DataLoader(
        data_source=SlowReads(),
        sampler=aioloader.IndexSampler(SLOW_N, shuffle=True, num_epochs=1, seed=3),
        operations=[Noise(), aioloader.Batch(8)],
        worker_count=workers,
        **kwargs,
    )


def _read_threads_seen(iterator: Any) -> list[tuple[int, int]]:
    """(read threads, records window bound) after each batch, and the batches in `found`."""
    seen = []
    for batch in iterator:
        statistics = iterator.statistics()
        seen.append((statistics.read_threads, statistics.buffer("records window").capacity, batch.tolist()))
    return seen


@repeated
def test_auto_grows_the_read_threads_of_slow_reads_and_keeps_the_batches(repeat: int) -> None:
    expected = [batch.tolist() for batch in slow_loader(0)]
    seen = _read_threads_seen(iter(slow_loader("auto")))
    assert [batch for _, _, batch in seen] == expected
    threads = [count for count, _, _ in seen]
    assert max(threads) > aioloader.ReadOptions().num_threads, threads
    # The window grows with them: two records per read thread.
    assert max(capacity for _, capacity, _ in seen) >= 2 * max(threads)


def test_given_read_options_are_kept_with_auto() -> None:
    options = aioloader.ReadOptions(num_threads=4, prefetch_buffer_size=50)
    seen = _read_threads_seen(iter(slow_loader("auto", read_options=options)))
    assert {count for count, _, _ in seen} <= {0, 4}


def test_read_threads_do_not_grow_above_the_memory_bound() -> None:
    seen = _read_threads_seen(iter(slow_loader("auto", memory_limit_bytes=1)))
    assert {count for count, _, _ in seen} <= {0, aioloader.ReadOptions().num_threads}

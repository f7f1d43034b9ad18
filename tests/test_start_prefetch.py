"""`start_prefetch()`: the pipeline starts filling before the first `next()`, as in Grain.

With workers, they start at once. With `worker_count=0` Grain still reads
ahead on its read threads, so aioloader reads the first output's records on
other threads there too, and runs the operations in the caller's thread at
`next()`. Either way the outputs, the errors and the states are those of
an iterator that never prefetched.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import aioloader as al
from tests.conftest import aioloader_threads, repeated
from tests.grain_reference import grain_python
from tests.support.outputs import notes
from tests.support.reference import assert_same_outputs


class Watched:
    """Notes which thread read each key; `first_reads` is set once `wanted` keys were read.
    `hold`, when given, keeps every read waiting until it is set; key `bad` raises `error`."""

    def __init__(
        self,
        size: int,
        wanted: int = 1,
        bad: int | None = None,
        error: BaseException | None = None,
        getitems: bool = False,
    ) -> None:
        self.size, self.wanted, self.bad, self.error = size, wanted, bad, error
        self.lock = threading.Lock()
        self.reads: list[tuple[int, str]] = []
        self.first_reads = threading.Event()
        if getitems:
            self.__getitems__ = lambda keys: [self[k] for k in keys]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        if key == self.bad:
            assert self.error is not None
            raise self.error
        with self.lock:
            self.reads.append((key, threading.current_thread().name))
            if len(self.reads) >= self.wanted:
                self.first_reads.set()
        return key


class Thread(al.MapTransform):
    """Pairs each element with the thread that transformed it."""

    def map(self, element: Any) -> Any:
        return (element, threading.current_thread().name)


def loader(source: Any, workers: int | str = 0, batch: int = 4, **kwargs: Any) -> al.DataLoader:
    return al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(len(source), shuffle=True, seed=8, num_epochs=1),
        operations=[al.Batch(batch, batch_fn=list)],
        worker_count=workers,
        **kwargs,
    )


@repeated
@pytest.mark.parametrize("workers", [1, 3, "auto"])  # "auto" starts with a worker when asked to prefetch
def test_workers_start_before_the_first_next(workers: int | str, repeat: int) -> None:
    source = Watched(40, wanted=4)
    with iter(loader(source, workers)) as iterator:
        iterator.start_prefetch()
        assert source.first_reads.wait(10), "no record was read after start_prefetch()"
        assert_same_outputs(list(iterator), list(loader(Watched(40), 0)))


@repeated
@pytest.mark.parametrize("getitems", [False, True], ids=["getitem", "getitems"])
def test_worker_count_0_reads_the_first_output_on_other_threads(getitems: bool, repeat: int) -> None:
    source = Watched(40, wanted=4, getitems=getitems)
    sampler = al.IndexSampler(40, shuffle=True, seed=8, num_epochs=1)
    with iter(loader(source)) as iterator:
        iterator.start_prefetch()
        assert source.first_reads.wait(10), "the first batch was not read after start_prefetch()"
        with source.lock:
            early = list(source.reads)
        assert sorted(key for key, _ in early) == sorted(sampler.record_keys(0, 4))
        assert all(name.startswith("aioloader-") for _, name in early)
        got = list(iterator)
    assert got == [sampler.record_keys(k, k + 4) for k in range(0, 40, 4)]
    assert sorted(key for key, _ in source.reads) == list(range(40)), "every record read exactly once"
    later = source.reads[4:]
    assert {name for _, name in later} == {threading.current_thread().name}


def test_worker_count_0_still_runs_the_operations_in_the_callers_thread() -> None:
    source = Watched(12, wanted=1)
    prefetching = al.DataLoader(
        data_source=source, sampler=al.IndexSampler(12, num_epochs=1), operations=[Thread()]
    )
    with iter(prefetching) as iterator:
        iterator.start_prefetch()
        assert source.first_reads.wait(10)
        assert source.reads[0][1] != threading.current_thread().name
        got = list(iterator)
    assert got == [(k, threading.current_thread().name) for k in range(12)]


@pytest.mark.parametrize("workers", [0, 2])
def test_start_prefetch_is_idempotent_and_keeps_the_state(workers: int) -> None:
    wanted = list(loader(al.RangeDataSource(0, 30), 0))
    with iter(loader(al.RangeDataSource(0, 30), workers)) as iterator:
        before = iterator.get_state()
        iterator.start_prefetch()
        iterator.start_prefetch()
        assert iterator.get_state() == before
        head = [next(iterator), next(iterator)]
        iterator.start_prefetch()  # running already: nothing more to start
        assert_same_outputs(head + list(iterator), wanted)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_iterator_prefetches_from_its_state(workers: int) -> None:
    wanted = list(loader(Watched(30), 0))
    with iter(loader(Watched(30), workers)) as first:
        for _ in range(3):
            next(first)
        state = first.get_state()
    source = Watched(30, wanted=4)
    with iter(loader(source, workers)) as resumed:
        resumed.set_state(state)
        resumed.start_prefetch()
        assert source.first_reads.wait(10)
        assert_same_outputs(list(resumed), wanted[3:])
    assert len(source.reads) == 30 - 12


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_after_the_early_reads_comes_in_order(workers: int) -> None:
    sampler = al.IndexSampler(20, shuffle=True, seed=8, num_epochs=1)
    bad = sampler.record_keys(5, 6)[0]  # in the second batch
    plain = iter(loader(Watched(20, bad=bad, error=KeyError("no such key")), workers))
    early = iter(loader(Watched(20, bad=bad, error=KeyError("no such key")), workers))
    early.start_prefetch()
    for iterator in (plain, early):
        with iterator:
            assert next(iterator) == sampler.record_keys(0, 4)
            with pytest.raises(KeyError) as raised:
                next(iterator)
            assert f"key={bad}" in notes(raised.value)


@pytest.mark.parametrize(
    "error", [ValueError("broken"), KeyboardInterrupt(), SystemExit(3)], ids=["ValueError", "Ctrl-C", "exit"]
)
@pytest.mark.parametrize("bad_batch", [0, 3])
def test_an_error_in_an_early_read_is_raised_at_the_first_next(error: BaseException, bad_batch: int) -> None:
    # A read of the first batch, on the early read's thread: raised in the caller
    # as a read there would have been (an Exception with a note naming the record).
    sampler = al.IndexSampler(20, shuffle=True, seed=8, num_epochs=1)
    bad = sampler.record_keys(bad_batch, bad_batch + 1)[0]
    with iter(loader(Watched(20, bad=bad, error=error))) as iterator:
        iterator.start_prefetch()
        with pytest.raises(type(error)) as raised:
            next(iterator)
    if isinstance(error, Exception):
        assert f"key={bad}" in notes(raised.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_closing_a_prefetching_iterator_that_never_delivered_joins_its_threads(workers: int) -> None:
    release = threading.Event()

    class Held(Watched):
        def __getitem__(self, key: int) -> int:
            release.wait(5)
            return super().__getitem__(key)

    iterator = iter(loader(Held(200, wanted=1), workers, read_options=al.ReadOptions(num_threads=4)))
    iterator.start_prefetch()
    assert aioloader_threads(), "start_prefetch() started no thread"
    release.set()
    iterator.close()
    assert aioloader_threads() == []
    iterator.start_prefetch()  # closed: starts nothing
    assert aioloader_threads() == []


@pytest.mark.parametrize(
    "options",
    [al.ReadOptions(num_threads=0), al.ReadOptions(prefetch_buffer_size=0)],
    ids=["no-threads", "no-buffer"],
)
def test_no_read_ahead_at_worker_count_0_when_the_options_allow_none(options: al.ReadOptions) -> None:
    source = Watched(12)
    with iter(loader(source, read_options=options)) as iterator:
        iterator.start_prefetch()
        assert aioloader_threads() == []
        assert source.reads == []
        assert next(iterator) == al.IndexSampler(12, shuffle=True, seed=8, num_epochs=1).record_keys(0, 4)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_the_async_iterator_prefetches_on_its_loop(workers: int) -> None:
    source = Watched(40, wanted=4)
    wanted = list(loader(al.RangeDataSource(0, 40), 0))
    iterator = aiter(loader(source, workers))
    iterator.start_prefetch()
    while not source.first_reads.is_set():
        await asyncio.sleep(0.001)  # the reads run on threads; the loop stays free
    async with iterator:
        assert_same_outputs([x async for x in iterator], wanted)


def test_the_async_iterator_needs_its_loop_to_prefetch() -> None:
    iterator = aiter(loader(al.RangeDataSource(0, 8), 2))
    with pytest.raises(RuntimeError, match=r"start_prefetch\(\) must be called on the event loop"):
        iterator.start_prefetch()
    assert aioloader_threads() == []


def test_grains_iterator_and_ours_prefetch_the_same_batches() -> None:
    gp = grain_python()
    batches = []
    for module, source in ((gp, list(range(10))), (al, al.RangeDataSource(0, 10))):
        built = module.DataLoader(
            data_source=source,
            sampler=module.IndexSampler(10, shuffle=True, seed=3, num_epochs=1),
            operations=[module.Batch(4)],
        )
        iterator = iter(built)
        iterator.start_prefetch()
        batches.append(list(iterator))
    assert_same_outputs(batches[1], batches[0])


# The Dataset API's iterators (Grain's DatasetIterator.start_prefetch)


@repeated
def test_a_dataset_iterator_starts_its_parallel_parts(repeat: int) -> None:
    source = Watched(40, wanted=4)
    dataset = al.MapDataset.source(source).shuffle(seed=8).to_iter_dataset().map(lambda x: x * 2).prefetch(2)
    with iter(dataset) as iterator:
        iterator.start_prefetch()
        iterator.start_prefetch()  # idempotent
        assert source.first_reads.wait(10), "no record was read after start_prefetch()"
        assert iterator.get_state() == iter(dataset).get_state()  # nothing delivered yet
        got = list(iterator)
    assert got == list(al.MapDataset.source(Watched(40)).shuffle(seed=8).map(lambda x: x * 2))


def test_a_dataset_iterator_prefetches_through_stages_in_order_and_after_set_state() -> None:
    def parts() -> al.IterDataset[int]:
        left = al.MapDataset.range(0, 20).to_iter_dataset().prefetch(1)
        return al.IterDataset.mix([left, al.MapDataset.range(100, 120).to_iter_dataset()], [1, 2])

    wanted = list(parts())
    iterator = iter(parts())
    head = [next(iterator) for _ in range(7)]
    resumed = iter(parts())
    resumed.set_state(iterator.get_state())
    resumed.start_prefetch()
    assert head + list(resumed) == wanted
    iterator.close()


@pytest.mark.asyncio
async def test_an_async_dataset_iterator_prefetches_on_its_loop() -> None:
    dataset = al.MapDataset.range(12).to_iter_dataset().map(lambda x: x + 1).prefetch(2)
    iterator = aiter(dataset)
    iterator.start_prefetch()
    assert [x async for x in iterator] == list(range(1, 13))


def test_grains_dataset_iterator_and_ours_prefetch_the_same_elements() -> None:
    gp = grain_python()
    got = []
    for module in (gp, al):
        iterator = iter(module.MapDataset.range(10).shuffle(seed=3).to_iter_dataset().map(lambda x: x * 3))
        iterator.start_prefetch()
        got.append(list(iterator))
    assert got[1] == got[0]

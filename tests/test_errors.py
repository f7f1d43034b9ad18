"""Contract 4: errors reach the consumer in output order, with type, traceback, index and key."""

from __future__ import annotations

import asyncio
import collections
import gc
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aioloader import (
    Batch,
    DataLoader,
    FilterTransform,
    FlatMapTransform,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    RangeDataSource,
)
from tests.conftest import repeated, wait_for_no_threads
from tests.support.outputs import drain, notes
from tests.support.reference import LateEarly
from tests.support.transforms import BrokenSource, FailOn


class AsyncBrokenSource(BrokenSource):
    async def aget(self, key: int) -> int:
        await asyncio.sleep(0)
        return self[key]


class FlatFail(FlatMapTransform):
    def flat_map(self, element: Any) -> Any:
        yield element
        if element == 7:
            raise KeyError("flat-map failed halfway")
        yield element + 100


def loader_with(operations: list[Any], workers: int, source: Any = None, shuffle: bool = False) -> DataLoader:
    return DataLoader(
        data_source=source or RangeDataSource(0, 40),
        sampler=IndexSampler(40, shuffle=shuffle, seed=5, num_epochs=1),
        operations=operations,
        worker_count=workers,
    )


@repeated
@pytest.mark.parametrize("workers", [0, 1, 2, 8])
def test_every_output_before_the_error_is_delivered(workers: int, repeat: int) -> None:
    got, error = drain(loader_with([FailOn({13, 17, 30})], workers))
    assert got == list(range(13))
    assert type(error) is ValueError
    assert "bad element 13" in str(error)
    assert "index=13, record_key=13" in notes(error)
    assert "operations[0] (FailOn.map)" in notes(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_shuffled_error_names_the_index_and_the_key(workers: int) -> None:
    sampler = IndexSampler(40, shuffle=True, seed=5, num_epochs=1)
    keys = [sampler[i].record_key for i in range(40)]
    got, error = drain(loader_with([FailOn({keys[21]})], workers, shuffle=True))
    assert got == keys[:21]
    assert f"index=21, record_key={keys[21]}" in notes(error)


@pytest.mark.parametrize("workers", [0, 3])
def test_batches_before_the_failing_batch_are_delivered(workers: int) -> None:
    got, error = drain(loader_with([FailOn({13}), Batch(4)], workers))
    assert [b.tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_later_operation_failing_earlier_wins(workers: int) -> None:
    got, error = drain(loader_with([FailOn({20}), FailOn({5}, KeyError)], workers))
    assert got == list(range(5))
    assert type(error) is KeyError
    assert "operations[1]" in notes(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_read_errors_name_the_source_and_the_key(workers: int) -> None:
    got, error = drain(loader_with([], workers, source=BrokenSource(40, {9})))
    assert got == list(range(9))
    assert type(error) is OSError
    assert "reading from BrokenSource" in notes(error)
    assert "record_key=9" in notes(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_async_source_errors_arrive_in_order(workers: int) -> None:
    got, error = drain(loader_with([], workers, source=AsyncBrokenSource(40, {3, 30})))
    assert got == [0, 1, 2]
    assert "record_key=3" in notes(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_flat_map_error_drops_the_failing_records_outputs(workers: int) -> None:
    got, error = drain(loader_with([FlatFail(), Batch(3)], workers))
    flat = [x for b in got for x in b.tolist()]
    assert flat == [x for e in range(7) for x in (e, e + 100)][: len(flat)]
    assert len(flat) == 12  # 4 whole batches of the 14 elements before record 7
    assert type(error) is KeyError


@pytest.mark.parametrize("workers", [0, 2])
def test_batching_errors_name_the_batch(workers: int) -> None:
    ragged = [lambda x: [0] * (1 + (x == 6)), Batch(4)]
    got, error = drain(loader_with(ragged, workers))
    assert len(got) == 1
    assert "cannot batch" in str(error)
    assert "index=4..7" in notes(error)


def test_the_traceback_reaches_the_users_code() -> None:
    _, error = drain(loader_with([FailOn({2})], 2))
    frames = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert "map" in frames  # FailOn.map, on the worker thread


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_is_closed_after_an_error(workers: int) -> None:
    iterator = iter(loader_with([FailOn({2})], workers))
    assert [next(iterator), next(iterator)] == [0, 1]
    with pytest.raises(ValueError, match="bad element 2"):
        next(iterator)
    with pytest.raises(StopIteration):
        next(iterator)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_async_errors_arrive_in_order(workers: int) -> None:
    got: list[Any] = []
    try:
        async for item in loader_with([FailOn({11})], workers):
            got.append(item)
    except ValueError as error:
        caught = error
    else:
        raise AssertionError("no error")
    assert got == list(range(11))
    assert "index=11" in notes(caught)


# Later chunks finishing first (LateEarly: record 21 waits for record 26) must
# not change which error comes first, nor what comes before it.


@repeated
@pytest.mark.parametrize("workers", [0, 1, 2, 8])
def test_an_earlier_error_wins_when_a_later_chunk_finishes_first(workers: int, repeat: int) -> None:
    got, error = drain(loader_with([LateEarly(workers), FailOn({21, 26})], workers))
    assert got == list(range(21))
    assert "bad element 21" in str(error)
    assert "index=21, record_key=21" in notes(error)


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_batches_before_an_error_arrive_when_a_later_chunk_fails_first(workers: int) -> None:
    got, error = drain(loader_with([LateEarly(workers), FailOn({22, 27}), Batch(4)], workers))
    assert [b.tolist() for b in got] == [list(range(b, b + 4)) for b in range(0, 20, 4)]
    assert "bad element 22" in str(error)


# A StopIteration (or StopAsyncIteration) from user code is an error like any
# other, not the end of the data (PEP 479 does the same for generators).


class StrayNext(MapTransform):
    def map(self, element: Any) -> Any:
        if element == 6:
            next(iter(()))  # a stray next() on an exhausted iterator
        return element


class StrayNextRandom(RandomMapTransform):
    def random_map(self, element: Any, rng: Any) -> Any:
        if element == 6:
            raise StopIteration
        return element


class StrayNextFilter(FilterTransform):
    def filter(self, element: Any) -> bool:
        if element == 6:
            raise StopIteration
        return True


class StrayNextFlatMap(FlatMapTransform):
    def flat_map(self, element: Any) -> Any:
        if element == 6:
            raise StopIteration  # raised by the function itself, not inside a generator
        return [element]


class StopsReading(BrokenSource):
    def __getitem__(self, key: int) -> int:
        if key == 6:
            raise StopIteration
        return key


async def stops_async(element: Any) -> Any:
    if element == 6:
        raise StopAsyncIteration
    return element


def stops_batching(elements: list[Any]) -> Any:
    if 6 in elements:
        raise StopIteration
    return list(elements)


STRAY_STOPS = {
    "map": ([StrayNext()], None, 6),
    "random-map": ([StrayNextRandom()], None, 6),
    "filter": ([StrayNextFilter()], None, 6),
    "flat-map": ([StrayNextFlatMap()], None, 6),
    "read": ([], StopsReading(40, set()), 6),
    "async-map": ([stops_async], None, 6),
    "batch-fn": ([Batch(4, batch_fn=stops_batching)], None, 1),
    "map-after-batch": ([Batch(3), lambda b: StrayNext().map(int(b[0]))], None, 2),
}


@pytest.mark.parametrize("case", list(STRAY_STOPS))
@pytest.mark.parametrize("workers", [0, 2])
def test_a_stray_stop_iteration_is_an_error_in_its_place(case: str, workers: int) -> None:
    operations, source, delivered = STRAY_STOPS[case]
    got, error = drain(loader_with(operations, workers, source=source))
    assert len(got) == delivered
    assert type(error) is RuntimeError
    assert "raised Stop" in str(error)
    assert isinstance(error.__cause__, (StopIteration, StopAsyncIteration))
    assert "index=" in notes(error)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_a_stray_stop_async_iteration_does_not_end_async_for(workers: int) -> None:
    got: list[Any] = []

    async def take_all() -> None:
        async for item in loader_with([stops_async], workers):
            got.append(item)

    with pytest.raises(RuntimeError, match="raised StopAsyncIteration") as caught:
        await take_all()
    assert got == list(range(6))
    assert "index=6, record_key=6" in notes(caught.value)


# KeyboardInterrupt and SystemExit from user code are not the data's errors:
# they stop the loader at once and reach the consumer as they are.


class Interrupts(MapTransform):
    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    def map(self, element: Any) -> Any:
        if element == 9:
            raise self.kind("stop now")
        return element


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit], ids=lambda k: k.__name__)
@pytest.mark.parametrize("workers", [0, 2])
def test_keyboard_interrupt_and_system_exit_from_a_transform_stop_the_loader(
    kind: type[BaseException], workers: int
) -> None:
    stops_at_once(iter(loader_with([Interrupts(kind)], workers)), kind)


def stops_at_once(iterator: Iterator[Any], kind: type[BaseException]) -> None:
    """`iterator` raises `kind` ("stop now") after some of the first 9 outputs, in order,
    then every thread has ended and the iterator is closed."""
    got: list[Any] = []
    with pytest.raises(kind, match="stop now"):
        got.extend(iterator)
    assert got == list(range(len(got)))
    assert len(got) <= 9
    assert wait_for_no_threads() == []
    assert list(iterator) == []  # closed


# The same from awaited user code (an async source's `aget`, an `async def` map), and a
# CancelledError that the user's code raises (a cancelled inner request): asyncio lets the
# first two out of the event loop itself, which ended the loop's thread and left the
# consumer waiting for good. Now each reaches the consumer and every thread ends.


class AsyncRaises:
    """An async source whose `aget` raises `kind` at key 9 (or, `in_map`, a map that does)."""

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    def __len__(self) -> int:
        return 40

    def __getitem__(self, key: int) -> int:
        return key

    async def aget(self, key: int) -> int:
        await asyncio.sleep(0)
        if key == 9:
            raise self.kind("stop now")
        return key

    async def map(self, element: int) -> int:
        return await self.aget(element)


STOPPERS = [KeyboardInterrupt, SystemExit, asyncio.CancelledError]


@pytest.mark.parametrize("kind", STOPPERS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("where", ["aget", "async map"])
@pytest.mark.parametrize("workers", [0, 2])
def test_an_interrupt_from_awaited_user_code_reaches_for(
    kind: type[BaseException], where: str, workers: int
) -> None:
    raising = AsyncRaises(kind)
    operations = [raising.map] if where == "async map" else []
    source = RangeDataSource(0, 40) if where == "async map" else raising
    stops_at_once(iter(loader_with(operations, workers, source)), kind)


class CancelsItsOwnTask:
    """An async source whose `aget` cancels the task it runs in at key 9, then awaits (or,
    as `map`, an `async def` map that does): `asyncio.current_task().cancel()`."""

    def __len__(self) -> int:
        return 40

    async def aget(self, key: int) -> int:
        await asyncio.sleep(0)
        if key == 9:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)  # the cancellation lands here
        return key

    async def map(self, element: int) -> int:
        return await self.aget(element)


@repeated
@pytest.mark.parametrize("where", ["aget", "async map"])
@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("how", ["for", "async for"])
def test_awaited_code_that_cancels_its_own_task_ends_the_loader_with_that_error(
    how: str, workers: int, where: str, repeat: int
) -> None:
    """As at `worker_count=0`, where it cancels the consumer's task: the consumer gets the
    CancelledError, after the outputs before it. With workers the segment's task got it and
    ended without a word: the consumer waited for good."""
    cancels = CancelsItsOwnTask()
    operations = [cancels.map] if where == "async map" else []
    source = RangeDataSource(0, 40) if where == "async map" else cancels
    loader = loader_with(operations, workers, source)
    got: list[Any] = []

    async def take_all() -> None:
        async with aiter(loader) as iterator:
            async for element in iterator:
                got.append(element)

    def take_all_by_for() -> None:
        got.extend(loader)

    with pytest.raises(asyncio.CancelledError):
        (take_all_by_for if how == "for" else lambda: asyncio.run(take_all()))()
    assert got == list(range(len(got)))
    assert len(got) <= 9
    assert wait_for_no_threads() == []


class AgetReturnsACoroutine:
    """An async source that returns, at keys 5 and 6, coroutines it forgot to await;
    `aget_many` returns its records in `container`."""

    def __init__(self, container: Callable[[list[Any]], Any] = list) -> None:
        self.container = container

    def __len__(self) -> int:
        return 40

    async def aget(self, key: int) -> Any:
        return asyncio.sleep(0, key) if key in (5, 6) else key

    async def aget_many(self, keys: list[int]) -> Any:
        return self.container([await self.aget(key) for key in keys])


@pytest.mark.parametrize("many", [None, list, collections.deque])
@pytest.mark.parametrize("workers", [0, 2])
def test_an_awaitable_from_aget_is_a_type_error_never_a_record(workers: int, many: Any) -> None:
    source = AgetReturnsACoroutine(many or list)
    if many is None:
        source.aget_many = None  # type: ignore[assignment, method-assign]
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        got, error = drain(loader_with([], workers, source))
        gc.collect()
    assert [str(w.message) for w in warned if "never awaited" in str(w.message)] == []
    method = "aget_many" if many else "aget"
    assert type(error) is TypeError
    assert f"AgetReturnsACoroutine.{method} returned an awaitable (coroutine), not a record" in str(error)
    assert got == list(range(len(got)))
    assert len(got) <= 5
    assert wait_for_no_threads() == []


@pytest.mark.parametrize("kind", STOPPERS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_an_interrupt_from_awaited_user_code_reaches_async_for(
    kind: type[BaseException], workers: int
) -> None:
    got: list[Any] = []

    async def take_all() -> None:
        async with aiter(loader_with([], workers, AsyncRaises(kind))) as iterator:
            async for element in iterator:
                got.append(element)

    with pytest.raises(kind, match="stop now"):
        await take_all()
    assert got == list(range(len(got)))
    assert len(got) <= 9

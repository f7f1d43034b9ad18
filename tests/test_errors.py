"""Contract 4: errors reach the consumer in output order, with type, traceback, index and key."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import pytest

from aioloader import (
    Batch,
    DataLoader,
    FilterTransform,
    FlatMapTransform,
    IndexSampler,
    MapTransform,
    RangeDataSource,
)
from tests.conftest import repeated
from tests.support.outputs import drain, notes
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


class RaisesOn(MapTransform):
    """Raises `error(...)` on one record value: errors that are not plain Exceptions."""

    def __init__(self, bad: int, error: type[BaseException]) -> None:
        self.bad, self.error = bad, error

    def map(self, element: Any) -> Any:
        if element == self.bad:
            raise self.error(f"raised on {element}")
        return element


@pytest.mark.parametrize("kind", [StopIteration, SystemExit, GeneratorExit], ids=lambda k: k.__name__)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_raising_stop_iteration_or_system_exit_fails_in_order(
    kind: type[BaseException], workers: int
) -> None:
    # StopIteration would end `list.extend` over a `map` silently, losing records 5 onwards;
    # SystemExit and GeneratorExit would skip the outputs before them. Each arrives in order.
    got, error = drain(loader_with([RaisesOn(5, kind), Batch(2)], workers), BaseException)
    assert [x.tolist() for x in got] == [[0, 1], [2, 3]]
    assert type(error) is (RuntimeError if kind is StopIteration else kind)
    assert "index=5, record_key=5" in notes(error)


@pytest.mark.parametrize("kind", [StopIteration, SystemExit], ids=lambda k: k.__name__)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_filter_raising_stop_iteration_or_system_exit_fails_in_order(
    kind: type[BaseException], workers: int
) -> None:
    class Refuses(FilterTransform):
        def filter(self, element: Any) -> bool:
            if element == 9:
                raise kind("refused")
            return True

    got, error = drain(loader_with([Refuses()], workers), BaseException)
    assert got == list(range(9))
    assert type(error) is (RuntimeError if kind is StopIteration else kind)


class LyingSource(RangeDataSource):
    """`__getitems__` returns one record fewer than it was asked for."""

    def __getitems__(self, keys: Any) -> list[int]:
        return super().__getitems__(keys)[1:]


class StopsReading:
    """Raises StopIteration for key 6 (and has no `__getitems__`)."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, key: int) -> int:
        if key == 6:
            raise StopIteration
        return key


@pytest.mark.parametrize("workers", [0, 2])
def test_a_source_that_returns_too_few_records_is_an_error_not_a_gap(workers: int) -> None:
    got, error = drain(loader_with([], workers, source=LyingSource(0, 40)))
    assert got == []
    assert "returned" in str(error)
    assert "LyingSource" in str(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_source_raising_stop_iteration_fails_at_its_record(workers: int) -> None:
    got, error = drain(loader_with([], workers, source=StopsReading()))
    assert got == list(range(6))
    assert type(error) is RuntimeError
    assert "index=6, record_key=6" in notes(error)

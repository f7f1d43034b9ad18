"""Contract 7: bad arguments are rejected at once, naming the parameter and the value."""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import numpy as np
import pytest

from aioloader import (
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    InMemoryDataSource,
    MapTransform,
    RangeDataSource,
    ReadOptions,
)
from aioloader._loader import MAX_WORKER_COUNT
from tests.support.outputs import adrain, drain, notes


def make(**overrides: Any) -> DataLoader:
    arguments: dict[str, Any] = {
        "data_source": RangeDataSource(0, 10),
        "sampler": IndexSampler(10, num_epochs=1),
    }
    arguments.update(overrides)
    return DataLoader(**arguments)


class HoldsALock(MapTransform):
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def map(self, element: Any) -> Any:
        return element


def whole_stream(records: Any) -> Any:
    """A Grain legacy operation: Grain's DataLoader calls a plain callable with every record."""
    yield from records


class WholeStream:
    def __call__(self, records: Any) -> Any:
        yield from records


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"worker_count": -1}, ValueError, r"`worker_count` must be greater than or equal to 0, got -1"),
        ({"worker_count": 2.0}, TypeError, r"`worker_count` must be an int"),
        ({"worker_count": 10_000}, ValueError, r"`worker_count` must be at most 256 .*got 10000"),
        ({"executor": "process"}, ValueError, r"`executor` must be one of .*'process'"),
        ({"read_options": {"num_threads": 4}}, TypeError, r"`read_options` must be a ReadOptions"),
        (
            {"sampler": range(10)},
            TypeError,
            r"`sampler\[0\]` must return a RecordMetadata.*got 0 of type int",
        ),
        ({"sampler": 10}, TypeError, r"`sampler` must have __getitem__\(index\) -> RecordMetadata"),
        (
            {"sampler": IndexSampler(11, num_epochs=1)},
            ValueError,
            r"`sampler` has num_records=11.*holds only 10",
        ),
        ({"data_source": object()}, TypeError, r"`data_source` must define __len__"),
        ({"data_source": 42}, TypeError, r"`data_source`"),
        ({"operations": "map"}, TypeError, r"`operations` must be a list or tuple"),
        ({"operations": [Batch(2), Batch(3)]}, ValueError, r"at most one Batch, got 2"),
        ({"operations": [lambda x: x, 17]}, TypeError, r"`operations\[1\]` must be a MapTransform.*got 17"),
        (
            {"operations": [lambda x: x, whole_stream]},
            TypeError,
            r"`operations\[1\]` \(whole_stream\) is a generator function.*Grain's legacy operations",
        ),
        (
            {"operations": [WholeStream()]},
            TypeError,
            r"`operations\[0\]` \(WholeStream\) is a generator function",
        ),
    ],
    ids=[
        "negative-workers",
        "float-workers",
        "ten-thousand-workers",
        "unknown-executor",
        "dict-read-options",
        "range-sampler",
        "int-sampler",
        "sampler-longer-than-source",
        "no-len-source",
        "int-source",
        "string-operations",
        "two-batches",
        "int-operation",
        "legacy-generator-operation",
        "legacy-generator-object",
    ],
)
def test_loader_arguments(overrides: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make(**overrides)


class LenRaises:
    def __len__(self) -> int:
        raise OSError("the index file is gone")

    def __getitem__(self, key: int) -> int:
        return key


def test_a_source_whose_len_raises_gives_its_own_error_with_the_parameter_named() -> None:
    with pytest.raises(OSError, match="the index file is gone") as raised:
        make(data_source=LenRaises())
    assert raised.value.__notes__ == ["aioloader: raised by `len(data_source)`"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": 0}, ValueError, r"`batch_size` must be greater than or equal to 1, got 0"),
        ({"batch_size": "8"}, TypeError, r"`batch_size` must be an int"),
        ({"batch_size": 2, "drop_remainder": 1}, TypeError, r"`drop_remainder` must be a bool"),
        ({"batch_size": 2, "batch_fn": "stack"}, TypeError, r"`batch_fn` must be callable"),
    ],
    ids=["zero-batch", "str-batch", "int-drop", "str-batch-fn"],
)
def test_batch_arguments(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Batch(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_threads": -1}, r"ReadOptions: num_threads must be non-negative, got -1\."),
        ({"prefetch_buffer_size": -1}, r"ReadOptions: prefetch_buffer_size must be non-negative, got -1\."),
    ],
    ids=["negative-threads", "negative-buffer"],
)
def test_read_options_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReadOptions(**kwargs)


def test_device_put_must_be_a_device_put() -> None:
    with pytest.raises(TypeError, match="`device_put` must be a DevicePut or None, got 'gpu'"):
        make(device_put="gpu")


def test_source_constructors() -> None:
    with pytest.raises(ValueError, match="`step` must not be zero"):
        RangeDataSource(0, 10, 0)
    with pytest.raises(TypeError, match="`elements` must be a sequence"):
        InMemoryDataSource(42)  # type: ignore[arg-type]


def test_an_operation_that_cannot_be_copied_is_named_when_iteration_starts() -> None:
    # Copied when the iteration starts (the pattern that the workers copy), not when the
    # loader is made, so that a large transform is not copied once more only to be checked:
    # the error comes with the first `next()`, before any record runs.
    ran: list[int] = []
    iterator = iter(make(operations=[HoldsALock(), ran.append], worker_count=2))
    with pytest.raises(TypeError, match=r"`operations\[0\]` \(HoldsALock.map\) cannot be deep-copied"):
        next(iterator)
    assert ran == []


class RefusesPickling(MapTransform):
    def __getstate__(self) -> Any:
        raise ValueError("I shall not be pickled")

    def map(self, element: Any) -> Any:
        return element


@pytest.mark.parametrize("workers", [2, "auto"])
def test_the_copys_own_error_arrives_as_itself_with_the_operation_named(workers: Any) -> None:
    """Grain raises its pickling's error as is (Grain's own `test_fails_to_pickle` expects
    this ValueError); here the copy's error arrives the same, with a note naming the
    operation. "auto" then keeps the operation in the consumer's thread instead."""
    iterator = iter(make(operations=[RefusesPickling()], worker_count=workers))
    if workers == "auto":
        assert [int(x) for x in iterator] == list(range(10))
        return
    with pytest.raises(ValueError, match="I shall not be pickled") as raised:
        next(iterator)
    assert "`operations[0]` (RefusesPickling.map) cannot be deep-copied" in notes(raised.value)


class StopsWhenCopied(MapTransform):
    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise StopIteration("a stray next() in __deepcopy__")

    def map(self, element: Any) -> Any:
        return element


@pytest.mark.parametrize("use_async", [False, True], ids=["for", "async-for"])
def test_a_copy_raising_stop_iteration_is_an_error_naming_the_operation_not_the_end(use_async: bool) -> None:
    """A StopIteration would read as the end of the data (Python turned it into "generator
    raised StopIteration", naming nothing): a RuntimeError from it, naming the operation."""
    loader = make(operations=[StopsWhenCopied()], worker_count=2)
    got, error = asyncio.run(adrain(aiter(loader))) if use_async else drain(loader)
    assert got == []  # before any record ran
    assert type(error) is RuntimeError
    assert str(error) == "deep-copying `operations[0]` (StopsWhenCopied.map) raised StopIteration"
    assert isinstance(error.__cause__, StopIteration)
    assert "`operations[0]` (StopsWhenCopied.map) cannot be deep-copied" in notes(error)


class ForgetsToReturn(MapTransform):
    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        copy.copy(self)  # and no `return`

    def map(self, element: Any) -> Any:
        return element


def test_a_deepcopy_that_returns_no_copy_is_named() -> None:
    """It was an AttributeError of None, naming nothing."""
    iterator = iter(make(operations=[ForgetsToReturn()], worker_count=2))
    with pytest.raises(
        TypeError, match=r"`operations\[0\]` \(ForgetsToReturn.map\): copying it for a worker"
    ):
        [next(iterator) for _ in range(2)]


def test_a_transform_that_opts_out_of_copies_is_shared() -> None:
    class Shared(HoldsALock):
        def __deepcopy__(self, memo: dict[int, Any]) -> Shared:
            return self

    assert list(make(operations=[Shared()], worker_count=2)) == list(range(10))


def test_the_largest_worker_count_is_allowed() -> None:
    with iter(make(worker_count=MAX_WORKER_COUNT)) as iterator:
        assert next(iterator) == 0
    assert MAX_WORKER_COUNT == 256  # as documented


# A source must return one record per key from __getitems__ / aget_many:
# records would otherwise be lost, or shifted onto other keys.


class Lying:
    """`__getitems__` returns `change` records more (or fewer) than it was given keys."""

    def __init__(self, change: int) -> None:
        self.change = change

    def __len__(self) -> int:
        return 40

    def __getitem__(self, key: int) -> int:
        return key

    def __getitems__(self, keys: list[int]) -> list[int]:
        found = list(keys)
        return found[: len(found) + self.change] if self.change < 0 else found + [-1] * self.change


class LyingAsync:
    def __init__(self, change: int) -> None:
        self.change = change

    def __len__(self) -> int:
        return 40

    async def aget(self, key: int) -> int:
        return key

    async def aget_many(self, keys: list[int]) -> list[int]:
        return Lying(self.change).__getitems__(keys)


@pytest.mark.parametrize("change", [-1, 1], ids=["fewer", "more"])
@pytest.mark.parametrize("source", [Lying, LyingAsync])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_source_returning_another_number_of_records_is_an_error(
    source: type[Any], change: int, workers: int
) -> None:
    got, error = drain(
        make(data_source=source(change), sampler=IndexSampler(40, num_epochs=1), worker_count=workers)
    )
    assert got == []  # the first read of all (one record) already lies
    assert isinstance(error, ValueError)
    method = "__getitems__" if source is Lying else "aget_many"
    assert f"`data_source` {source.__name__}.{method} returned {1 + change} records for 1 keys" in str(error)
    assert f"reading from {source.__name__} failed on the record with index=0" in notes(error)


def test_a_source_that_lies_only_about_some_keys_fails_where_it_lies() -> None:
    class LiesAbout17(Lying):
        def __getitems__(self, keys: list[int]) -> list[int]:
            return [k for k in keys if k != 17]

    got, error = drain(make(data_source=LiesAbout17(0), sampler=IndexSampler(40, num_epochs=1)))
    assert got == list(range(len(got)))  # nothing shifted onto another key
    assert len(got) <= 17
    assert "returned" in str(error)


# A filter's answer counts by its truth value, as in Grain; None (a forgotten `return`)
# would drop everything silently, and an answer with no truth value cannot be read.


class Verdict(FilterTransform):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def filter(self, element: Any) -> Any:
        return self.answer if element == 3 else True


@pytest.mark.parametrize("workers", [0, 2])
def test_a_filter_that_returns_none_is_named(workers: int) -> None:
    got, error = drain(
        make(operations=[Verdict(None)], sampler=IndexSampler(10, num_epochs=1), worker_count=workers)
    )
    assert got == [0, 1, 2]
    assert type(error) is TypeError
    assert str(error).startswith("`operations[0]` (Verdict.filter) returned None, which is no answer")
    assert "index=3, record_key=3" in notes(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_filter_answer_without_a_truth_value_is_the_records_error(workers: int) -> None:
    answer = np.array([True, False])
    got, error = drain(
        make(operations=[Verdict(answer)], sampler=IndexSampler(10, num_epochs=1), worker_count=workers)
    )
    assert got == [0, 1, 2]
    assert type(error) is ValueError
    assert "truth value" in str(error)
    assert "index=3, record_key=3" in notes(error)


@pytest.mark.parametrize(
    ("answer", "kept"),
    [(1, True), (0, False), ("yes", True), ("", False), ([True], True), ([], False)],
    ids=repr,
)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_filter_answer_counts_by_its_truth_value_as_in_grain(answer: Any, kept: bool, workers: int) -> None:
    loader = make(operations=[Verdict(answer)], sampler=IndexSampler(10, num_epochs=1), worker_count=workers)
    assert list(loader) == [0, 1, 2, *([3] if kept else []), 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("answer", [False, np.bool_(False), np.array(False)], ids=["bool", "np.bool_", "0-d"])
def test_a_filter_may_return_numpy_bools(answer: Any) -> None:
    loader = make(operations=[Verdict(answer)], sampler=IndexSampler(10, num_epochs=1), worker_count=2)
    assert list(loader) == [0, 1, 2, 4, 5, 6, 7, 8, 9]

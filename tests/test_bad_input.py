"""Contract 7: bad arguments are rejected at once, naming the parameter and the value."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from aioloader import (
    Batch,
    DataLoader,
    IndexSampler,
    InMemoryDataSource,
    MapTransform,
    RangeDataSource,
    ReadOptions,
)


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


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"worker_count": -1}, ValueError, r"`worker_count` must be greater than or equal to 0, got -1"),
        ({"worker_count": 2.0}, TypeError, r"`worker_count` must be an int"),
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
    ],
    ids=[
        "negative-workers",
        "float-workers",
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
    ],
)
def test_loader_arguments(overrides: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make(**overrides)


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
        ({"num_threads": -1}, r"`num_threads` must be greater than or equal to 0, got -1\."),
        (
            {"prefetch_buffer_size": -1},
            r"`prefetch_buffer_size` must be greater than or equal to 0, got -1\.",
        ),
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
    # Copied by each worker when it starts, so that a large transform is not
    # also copied once more, only to be checked, when the loader is made.
    iterator = iter(make(operations=[HoldsALock()], worker_count=2))
    with pytest.raises(TypeError, match=r"`operations\[0\]` \(HoldsALock.map\) cannot be deep-copied"):
        next(iterator)


def test_a_transform_that_opts_out_of_copies_is_shared() -> None:
    class Shared(HoldsALock):
        def __deepcopy__(self, memo: dict[int, Any]) -> Shared:
            return self

    assert list(make(operations=[Shared()], worker_count=2)) == list(range(10))

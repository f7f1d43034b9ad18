"""`grain.experimental.batch_and_pad`: a `batch_fn` that pads a short batch to the full size.

The expected values are written out, so that every interpreter checks them; where Grain
0.2.18 is installed (the GIL build of 3.11) the same calls are compared with Grain's.
Also: a MapDataset batch after a flat map is refused when it is made, as in Grain.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import pytest

import aioloader
from aioloader.experimental import batch_and_pad
from tests.support.outputs import assert_same


class Pair(NamedTuple):
    left: Any
    right: Any


CASES: list[tuple[str, list[Any], int, Any, Any]] = [
    ("ints", [1, 2], 4, 0, np.array([1, 2, 0, 0])),
    ("full", [1, 2, 3], 3, 0, np.array([1, 2, 3])),
    ("floats, pad -1", [np.float32(0.5)], 3, -1, np.array([0.5, -1, -1], dtype=np.float32)),
    ("arrays", [np.arange(3), np.arange(3, 6)], 3, 7, np.array([[0, 1, 2], [3, 4, 5], [7, 7, 7]])),
    (
        "nested dicts",
        [{"a": {"b": np.array([1, 2])}, "c": 1.5}],
        2,
        0,
        {"a": {"b": np.array([[1, 2], [0, 0]])}, "c": np.array([1.5, 0.0])},
    ),
    ("tuples", [(1, np.uint8(2))], 2, 0, (np.array([1, 0]), np.array([2, 0], dtype=np.uint8))),
    ("named tuples", [Pair(1, 2), Pair(3, 4)], 3, 9, Pair(np.array([1, 3, 9]), np.array([2, 4, 9]))),
]


@pytest.mark.parametrize(("name", "values", "size", "pad", "expected"), CASES, ids=[c[0] for c in CASES])
def test_pads_each_leaf_in_its_dtype(
    name: str, values: list[Any], size: int, pad: Any, expected: Any
) -> None:
    assert_same(batch_and_pad(values, batch_size=size, pad_value=pad), expected)


@pytest.mark.parametrize(("name", "values", "size", "pad", "expected"), CASES, ids=[c[0] for c in CASES])
def test_equals_grains(name: str, values: list[Any], size: int, pad: Any, expected: Any) -> None:
    grain = pytest.importorskip(
        "grain", reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only"
    )
    theirs = grain.experimental.batch_and_pad(values, batch_size=size, pad_value=pad)
    assert_same(batch_and_pad(values, batch_size=size, pad_value=pad), theirs)


def test_pads_the_last_batch_of_a_dataset_and_of_a_loader() -> None:
    pad = functools.partial(batch_and_pad, batch_size=4)
    expected = [np.array([1, 2, 3, 4]), np.array([5, 6, 7, 8]), np.array([9, 0, 0, 0])]
    datasets = [
        aioloader.MapDataset.range(1, 10).batch(4, batch_fn=pad),
        aioloader.MapDataset.range(1, 10).to_iter_dataset().batch(4, batch_fn=pad),
    ]
    for dataset in datasets:
        for got, want in zip(list(dataset), expected, strict=True):
            assert_same(got, want)
    loader = aioloader.DataLoader(
        data_source=range(1, 10),
        sampler=aioloader.SequentialSampler(9),
        operations=[aioloader.Batch(4, batch_fn=pad)],
        worker_count=2,
    )
    for got, want in zip(list(loader), expected, strict=True):
        assert_same(got, want)


@pytest.mark.parametrize(
    ("values", "size", "message"),
    [
        ([], 2, "0 values"),
        ([1, 2, 3], 2, "3 values to batch_size=2"),
        ([1], 0, "batch_size"),
        ([1], True, "batch_size"),
    ],
)
def test_bad_arguments_are_named(values: list[Any], size: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        batch_and_pad(values, batch_size=size)


def test_mismatched_elements_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="cannot batch"):
        batch_and_pad([(1, 2), (1,)], batch_size=3)


class FanOut:
    """A flat map of up to 3 elements, giving 2: every third slot is a None hole."""

    max_fan_out = 3

    def flat_map(self, element: int) -> list[int]:
        return [element, element]


def after_flat_map(lib: Any) -> list[Any]:
    """The MapDatasets Grain refuses to batch: a flat map upstream, nearby or further up."""
    flat = lib.experimental.FlatMapMapDataset(lib.MapDataset.range(4), FanOut())
    return [flat, flat.map(lambda x: x + 1), flat.slice(slice(0, 6)), flat.repeat(2)]


def test_batch_after_a_flat_map_is_refused_like_grain(grain: ModuleType) -> None:
    """A MapDataset batch after a flat map (whose None holes it would batch) is a ValueError
    when it is made, as in Grain; from an IterDataset, as Grain advises, it batches."""
    for theirs, mine in zip(after_flat_map(grain), after_flat_map(aioloader), strict=True):
        with pytest.raises(ValueError, match="can not follow `FlatMapMapDataset`"):
            theirs.batch(2)
        with pytest.raises(ValueError, match=r"`MapDataset\.batch` can not follow `FlatMapMapDataset`"):
            mine.batch(2)
    flat = after_flat_map(aioloader)[0]
    expected = list(after_flat_map(grain)[0].to_iter_dataset().batch(3))
    for got, want in zip(list(flat.to_iter_dataset().batch(3)), expected, strict=True):
        assert_same(got, want)

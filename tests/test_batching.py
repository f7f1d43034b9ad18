"""`Batch`'s default stacking: Grain's batches, exact strings and bytes, dicts matched by key."""

from __future__ import annotations

from collections import defaultdict, namedtuple
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader._operations.batching import stack
from tests.grain_reference import grain_python
from tests.support.reference import assert_same_outputs

Point = namedtuple("Point", ["x", "y"])

STRINGS = [
    b"ends in nul\x00",
    b"\x00\x00",
    b"",
    b"plain",
    "ends in nul\x00",
    "",
    "non-ASCII: \u00e9\u4e2d\U0001f600",
    "\x00",
]


class Identity(al.MapTransform):
    def map(self, element: Any) -> Any:
        return element


def batches(elements: list[Any], size: int, workers: int, operations: list[Any] | None = None) -> list[Any]:
    """`elements` through a loader (in order) and `Batch(size)`."""
    loader = al.DataLoader(
        data_source=al.InMemoryDataSource(elements),
        sampler=al.SequentialSampler(len(elements)),
        operations=[*(operations or [Identity()]), al.Batch(size)],
        worker_count=workers,
    )
    return list(loader)


class KeepAll(al.FilterTransform):
    def filter(self, element: Any) -> bool:
        return True


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("plan", ["fused", "tail"])
def test_bytes_and_strings_come_back_exactly_as_they_went_in(workers: int, plan: str) -> None:
    operations = [Identity()] if plan == "fused" else [KeepAll()]
    got = batches(STRINGS, 3, workers, operations)
    flat = [item for batch in got for item in batch]
    assert flat == STRINGS
    assert [type(item) for item in flat] == [type(item) for item in STRINGS]
    assert all(batch.dtype == object and batch.ndim == 1 for batch in got)


def test_strings_inside_structures_are_exact_too() -> None:
    elements = [{"text": "a\x00", "raw": (b"b\x00", np.int32(i))} for i in range(4)]
    batch = stack(elements)
    assert batch["text"].tolist() == ["a\x00"] * 4
    assert batch["raw"][0].tolist() == [b"b\x00"] * 4
    assert batch["raw"][1].dtype == np.int32


def test_strings_mixed_with_other_leaves_are_kept_as_they_are() -> None:
    batch = stack(["1", 1, np.arange(2)])
    assert batch.dtype == object
    assert batch[0] == "1"
    assert batch[1] == 1
    assert np.array_equal(batch[2], np.arange(2))


@pytest.mark.parametrize("workers", [0, 2])
def test_dicts_with_keys_in_another_order_are_batched_by_key(workers: int) -> None:
    elements = [
        {"a": np.int64(i), "b": np.float32(i) / 2} if i % 2 else {"b": np.float32(i) / 2, "a": np.int64(i)}
        for i in range(6)
    ]
    got = batches(elements, 3, workers)
    assert [list(batch) for batch in got] == [["a", "b"], ["a", "b"]]  # sorted, as jax.tree_util sorts
    assert np.concatenate([batch["a"] for batch in got]).tolist() == list(range(6))
    assert np.concatenate([batch["b"] for batch in got]).tolist() == [i / 2 for i in range(6)]


def test_batched_dicts_have_sorted_keys_as_in_jax() -> None:
    jax = pytest.importorskip("jax", reason="compares with jax.tree_util, which is not installed here")
    elements = [{"z": np.int32(i), "a": {"y": np.arange(2) + i, "b": np.float64(i)}} for i in range(3)]
    wanted = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *elements)
    assert_same_outputs([stack(elements)], [wanted])


def test_dict_subclasses_are_matched_by_their_keys_not_by_what_they_answer() -> None:
    # A defaultdict answers any key: one that lacks "a" but holds "c" (as many keys as
    # the others) must fail, not batch a default in place of its "a" and drop its "c".
    lacking = defaultdict(lambda: np.int64(-1), {"b": np.int64(1), "c": np.int64(2)})
    with pytest.raises(ValueError, match=r"element 1 is not a dict with keys \['a', 'b'\]"):
        stack([{"a": np.int64(0), "b": np.int64(0)}, lacking])
    assert "a" not in lacking  # and it was not asked for one
    alike = [defaultdict(int, {"a": np.int64(i), "b": np.int64(-i)}) for i in range(3)]
    assert_same_outputs([stack(alike)], [{"a": np.arange(3), "b": -np.arange(3)}])


def test_dicts_of_one_length_with_another_key_name_the_element() -> None:
    elements = [{"a": np.int64(i), "b": np.int64(i)} for i in range(4)]
    elements[2] = {"a": np.int64(2), "c": np.int64(2)}
    with pytest.raises(ValueError, match="element 2 is not a dict with keys"):
        stack(elements)


ORDINARY = {
    "scalars": [np.int32(1), np.int32(2), np.int32(3)],
    "python-ints": [1, 2, 3],
    "arrays": [np.arange(4) * i for i in range(3)],
    "dicts": [{"b": np.arange(2) + i, "a": np.float32(i)} for i in range(3)],
    "tuples": [(np.int64(i), np.ones(2) * i) for i in range(3)],
    "namedtuples": [Point(np.int8(i), np.arange(3)) for i in range(3)],
    "lists": [[np.int16(i), {"k": np.arange(1)}] for i in range(3)],
    "one": [{"x": np.arange(3)}],
}


@pytest.mark.parametrize("name", list(ORDINARY))
def test_ordinary_elements_batch_as_in_grain(name: str) -> None:
    grain_python()
    from grain._src.python.dataset.transformations.batch import make_batch

    assert_same_outputs([stack(ORDINARY[name])], [make_batch(ORDINARY[name])])


DIFFERENT = {
    "missing-key": [{"a": 1}, {"b": 2}],
    "extra-key": [{"a": 1}, {"a": 1, "b": 2}],
    "tuple-lengths": [(1, 2), (1, 2, 3)],
    "dict-and-list": [{"a": 1}, [1]],
    "shapes": [np.zeros(2), np.zeros(3)],
    "tuple-and-list": [(1, 2), [1, 2]],
}


@pytest.mark.parametrize("name", list(DIFFERENT))
def test_elements_of_different_structure_raise_the_type_grain_raises(name: str) -> None:
    with pytest.raises(ValueError, match="cannot batch"):
        stack(DIFFERENT[name])


@pytest.mark.parametrize("name", list(DIFFERENT))
def test_grain_raises_that_type_too(name: str) -> None:
    grain_python()
    from grain._src.python.dataset.transformations.batch import make_batch

    with pytest.raises(ValueError):  # noqa: PT011 - the type is what is compared
        make_batch(DIFFERENT[name])


LEAVES_OF_ONE_TYPE = {
    "ints": [1, -2, 3],
    "ints beyond int64": [2**63, 2**63 + 1],
    "an int beyond int64 among small ones": [5, 2**63, 7],
    "ints beyond uint64": [2**70, 1],
    "bools": [True, False],
    "floats": [1.5, -0.0, float("nan")],
    "complex": [1j, 2 + 0j],
    "float32 scalars": [np.float32(1), np.float32(2.5)],
    "uint64 scalars": [np.uint64(2**64 - 1), np.uint64(0)],
    "numpy bools": [np.bool_(True), np.bool_(False)],
    "arrays": [np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)],
    "big-endian arrays": [np.array(1, dtype=">i4"), np.array(2, dtype=">i4")],
    # Arrays of numbers take `np.array` of the list: it must promote and copy as `np.stack` does.
    "arrays of float32 and float64": [np.float32([1.5, 2]), np.float64([1 / 3, 4])],
    "arrays of int8 and uint8": [np.int8([-1, 2]), np.uint8([255, 0])],
    "arrays of bools and ints": [np.array([True, False]), np.array([3, 4])],
    "arrays of int64 and uint64": [np.int64([-1]), np.uint64([2**64 - 1])],
    "complex64 arrays": [np.complex64([1j]), np.complex64([2])],
    "empty arrays": [np.zeros((0, 3)), np.zeros((0, 3))],
    "views of one array": list(np.arange(12, dtype=np.float32).reshape(4, 3)[:, ::2]),
    "object arrays holding lists": [np.array([[1], [2, 3]], dtype=object), np.array([[4], []], dtype=object)],
    "string arrays of two lengths": [np.array(["a"]), np.array(["bcd"])],
    "structured arrays": [np.zeros(2, dtype="i4,f8"), np.ones(2, dtype="i4,f8")],
    "masked arrays": [np.ma.masked_array([1, 2]), np.ma.masked_array([3, 4])],
    "datetimes of two units": [np.datetime64("2020-01-01"), np.datetime64("2020-01-02T03")],
}


@pytest.mark.parametrize("name", sorted(LEAVES_OF_ONE_TYPE))
def test_leaves_of_one_type_stack_as_one_by_one(name: str) -> None:
    """Leaves of one type take a one-call path; its batch is exactly the one-by-one
    stack (`np.stack` of each leaf as an array): same dtype, shape and values."""
    elements = LEAVES_OF_ONE_TYPE[name]
    expected = np.stack([np.asarray(e) for e in elements])
    got = stack(elements)
    assert (got.dtype, got.shape, type(got)) == (expected.dtype, expected.shape, type(expected))
    np.testing.assert_array_equal(got, expected)


def test_arrays_of_different_shapes_still_name_the_shapes() -> None:
    with pytest.raises(ValueError, match=r"element has different shapes \[\(2,\), \(3,\)\]"):
        stack([np.zeros(2), np.zeros(3)])


NUMBERS_THEN_UNSTACKABLE = {
    "an int array, then a datetime array": [np.int64([1, 2]), np.array(["2020-01-01"] * 2, dtype="M8[D]")],
    "a float array, then a record array": [np.ones(2), np.zeros(2, dtype=[("a", "f4")])],
}


@pytest.mark.parametrize("name", sorted(NUMBERS_THEN_UNSTACKABLE))
def test_arrays_of_numbers_then_arrays_numpy_cannot_promote_raise_as_np_stack_does(name: str) -> None:
    """The first array is of numbers, a later one of a dtype numbers do not promote with:
    `np.stack` refuses them (DTypePromotionError, a TypeError); `np.array` of their list
    would make an object array of them instead, which the one-by-one stack never gives."""
    elements = NUMBERS_THEN_UNSTACKABLE[name]
    with pytest.raises(TypeError) as expected:
        np.stack(elements)
    with pytest.raises(type(expected.value)):
        stack(elements)

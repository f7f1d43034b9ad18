"""`Run.drop_leading`, `BatchPlan.cut` over the elements of the tail, and `BatchPlan.of_records`
over whole records (checked against `cut` over columns of whole records)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from aioloader._common.positions import Position
from aioloader._operations.batching import BatchPlan
from aioloader._program.jobs import Elements
from aioloader._program.records import RecordChunk


class WholeRecords:
    """The element columns of a chunk whose elements are its records, one each, in order:
    what `BatchPlan.of_records` computes as arithmetic, written out for `cut`."""

    def __init__(self, chunk: RecordChunk) -> None:
        self._start, self._indices, self._rngs = chunk.start, chunk.indices, chunk.rngs

    def positions_before(self, js: Sequence[int]) -> list[Position]:
        return [(self._start + j, 0, 0) for j in js]

    def positions_after(self, js: Sequence[int]) -> list[Position]:
        return [(self._start + j + 1, 0, 0) for j in js]

    def record_indices(self, js: Sequence[int]) -> list[int]:
        return [self._indices[j] for j in js]

    def record_rngs(self, js: Sequence[int]) -> list[np.random.Generator | None]:
        return [None] * len(js) if self._rngs is None else [self._rngs[j] for j in js]


def of_records(chunk: RecordChunk, count: int, size: int, skip_outputs: int) -> BatchPlan:
    return BatchPlan.of_records(
        chunk.items, count, size, chunk.start, chunk.indices, chunk.rngs, skip_outputs
    )


def as_lists(plan: BatchPlan) -> tuple[list[Any], ...]:
    return tuple(
        list(getattr(plan, name)) for name in ("groups", "before", "after", "first", "last", "last_rng")
    )


def chunk_of(items: list[int], origins: list[int] | None, start: int = 0) -> RecordChunk:
    # Shard 1 of 3: position p is global index 3p + 1, so positions and indices differ.
    chunk = RecordChunk(start, list(range(start, start + 10)), range(3 * start + 1, 3 * start + 31, 3))
    chunk.items, chunk.origins = items, origins
    return chunk


def test_drop_leading_drops_only_elements_of_the_first_origin() -> None:
    chunk = chunk_of([10, 11, 12, 20, 21], [0, 0, 0, 1, 1])
    chunk.drop_leading(2)
    assert chunk.items == [12, 20, 21]
    assert chunk.origins == [0, 1, 1]
    assert chunk.failure is None


def test_drop_leading_of_nothing_changes_nothing() -> None:
    chunk = chunk_of([1, 2, 3], None)
    chunk.drop_leading(0)
    assert chunk.items == [1, 2, 3]
    assert chunk.origins is None


@pytest.mark.parametrize(
    ("items", "origins", "count"),
    [([10, 20, 21], [0, 1, 1], 3), ([10, 11, 20], [0, 0, 1], 2), ([1, 2, 3], None, 1), ([], [], 1)],
    ids=["fewer", "as-many", "one-each", "empty"],
)
def test_drop_leading_past_the_first_origin_fails_on_it(
    items: list[int], origins: list[int] | None, count: int
) -> None:
    """A checkpoint inside a record's elements is only taken when more of them follow:
    a state that skips them all cannot come from this pipeline."""
    chunk = chunk_of(items, origins, start=5)
    chunk.drop_leading(count)
    assert (chunk.items, chunk.origins) == ([], [])
    assert chunk.failure is not None
    assert isinstance(chunk.failure.error, ValueError)
    assert f"`state` skips {count} elements" in str(chunk.failure.error)
    assert "index=16, record_key=5" in chunk.failure.error.__notes__[0]  # the global index


def test_drop_leading_leaves_a_failure_on_the_first_origin_alone() -> None:
    chunk = chunk_of([10], [0])
    chunk.failure = chunk.blame(0, KeyError("the record failed"), "operations[0]")
    chunk.drop_leading(3)  # cut short by the failure: it gave fewer, and the failure comes next
    assert chunk.items == []
    assert isinstance(chunk.failure.error, KeyError)


def test_a_plan_of_whole_records_gives_positions_indices_and_generators() -> None:
    chunk = chunk_of(list(range(100, 107)), None, start=20)
    rng = np.random.default_rng(0)
    chunk.rngs = [None] * 6 + [rng]
    plan = of_records(chunk, 7, 3, skip_outputs=1)
    assert plan.groups == [[100, 101, 102], [103, 104, 105], [106]]
    assert plan.before == [(20, 0, 1), (23, 0, 0), (26, 0, 0)]  # the first batch skips an output
    assert list(plan.after) == [(23, 0, 0), (26, 0, 0), (27, 0, 0)]
    assert list(plan.first) == [61, 70, 79]  # global indices, not positions
    assert plan.last == [67, 76, 79]
    assert plan.last_rng == [None, None, rng]


@pytest.mark.parametrize("rngs", [False, True])
@pytest.mark.parametrize("indices", ["range", "list"])
@pytest.mark.parametrize(
    ("count", "size", "skip"), [(0, 4, 3), (1, 1, 0), (7, 3, 1), (9, 3, 0), (10, 4, 2), (3, 8, 0)]
)
def test_a_plan_of_whole_records_is_the_cut_over_their_columns(
    count: int, size: int, skip: int, indices: str, rngs: bool
) -> None:
    chunk = chunk_of(list(range(500, 510)), None, start=40)
    if indices == "list":  # a resumed Grain state's detour gives a list
        chunk.indices = list(chunk.indices)
    if rngs:
        chunk.rngs = [np.random.default_rng(k) for k in range(10)]
    fast = of_records(chunk, count, size, skip)
    assert as_lists(fast) == as_lists(BatchPlan.cut(chunk.items, count, size, WholeRecords(chunk), skip))


def test_cut_over_elements_uses_their_own_positions() -> None:
    elements = Elements(
        items=["a", "b", "c", "d"],
        before=[(4, 1, 0), (4, 2, 0), (6, 0, 0), (6, 1, 0)],
        after=[(4, 2, 0), (5, 0, 0), (6, 1, 0), (7, 0, 0)],
        indices=[4, 4, 6, 6],
        rngs=[None, None, None, None],
        failure=None,
    )
    plan = BatchPlan.cut(elements.items, 3, 2, elements, skip_outputs=0)  # the 4th is not cut
    assert plan.groups == [["a", "b"], ["c"]]
    assert plan.before == [(4, 1, 0), (6, 0, 0)]
    assert plan.after == [(5, 0, 0), (6, 1, 0)]
    assert (plan.first, plan.last) == ([4, 6], [4, 6])


def columns(plan: BatchPlan) -> list[list[Any]]:
    """A plan's columns as lists (`after` and `first` may be ranges or even positions)."""
    plain = (plan.groups, plan.before, plan.after, plan.first, plan.last, plan.last_rng)
    return [list(column) for column in plain]


def test_cut_of_nothing_is_an_empty_plan() -> None:
    plan = BatchPlan.cut([], 0, 4, WholeRecords(chunk_of([], None)), skip_outputs=3)
    assert columns(plan) == [[], [], [], [], [], []]
    assert columns(of_records(chunk_of([], None), 0, 4, skip_outputs=3)) == columns(plan)

"""`Run.drop_leading`, and `BatchPlan.cut` over the two kinds of element columns."""

from __future__ import annotations

import numpy as np

from aioloader._operations.batching import BatchPlan
from aioloader._program.jobs import Elements
from aioloader._program.records import RecordChunk, WholeRecords


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
    chunk = chunk_of([10, 20, 21], [0, 1, 1])
    chunk.drop_leading(3)  # the first record gave fewer than 3 now: the rest stay
    assert chunk.items == [20, 21]
    assert chunk.origins == [1, 1]


def test_drop_leading_of_nothing_changes_nothing() -> None:
    chunk = chunk_of([1, 2, 3], None)
    chunk.drop_leading(0)
    assert chunk.items == [1, 2, 3]
    assert chunk.origins is None


def test_drop_leading_with_one_element_per_origin_drops_at_most_one() -> None:
    chunk = chunk_of([1, 2, 3], None)
    chunk.drop_leading(2)
    assert chunk.items == [2, 3]
    assert chunk.origins == [1, 2]


def test_cut_over_whole_records_gives_positions_indices_and_generators() -> None:
    chunk = chunk_of(list(range(100, 107)), None, start=20)
    rng = np.random.default_rng(0)
    chunk.rngs = [None] * 6 + [rng]
    plan = BatchPlan.cut(chunk.items, 7, 3, WholeRecords(chunk), skip_outputs=1)
    assert plan.groups == [[100, 101, 102], [103, 104, 105], [106]]
    assert plan.before == [(20, 0, 1), (23, 0, 0), (26, 0, 0)]  # the first batch skips an output
    assert plan.after == [(23, 0, 0), (26, 0, 0), (27, 0, 0)]
    assert plan.first == [61, 70, 79]  # global indices, not positions
    assert plan.last == [67, 76, 79]
    assert plan.last_rng == [None, None, rng]


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


def test_cut_of_nothing_is_an_empty_plan() -> None:
    plan = BatchPlan.cut([], 0, 4, WholeRecords(chunk_of([], None)), skip_outputs=3)
    assert plan == BatchPlan([], [], [], [], [], [])

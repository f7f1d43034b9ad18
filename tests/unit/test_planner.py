"""`ChunkPlanner` and `plan_chunks`: chunk sizes, whole batches, the first chunk, the end."""

from __future__ import annotations

import numpy as np

from aioloader import Batch, FilterTransform, IndexSampler, RangeDataSource
from aioloader._operations.transforms import compile_operations
from aioloader._program.jobs import ChunkJob
from aioloader._program.program import Program
from aioloader._sampling.walk import Walk
from aioloader._scheduling.planner import (
    CHUNK_BYTES,
    TARGET_SECONDS,
    WALL_SECONDS,
    ChunkPlanner,
    output_bytes,
    plan_chunks,
)


def jobs(planner: ChunkPlanner) -> list[ChunkJob]:
    found = []
    while (job := planner.next_job()) is not None:
        found.append(job)
    return found


def test_the_first_chunk_is_one_record_and_later_ones_are_sized_by_cost() -> None:
    planner = ChunkPlanner((0, 0, 0), 100, 1, 50)
    assert planner.next_job() == ChunkJob(0, 1)
    planner.observe(1, 0.3 * TARGET_SECONDS)  # 3 records make about the target's time
    assert planner.next_job() == ChunkJob(1, 3)
    planner.observe(3, 0.0)  # the cost is a moving average: 0.21 of the target now
    assert planner.next_size() == 4


def test_free_records_make_chunks_as_large_as_the_cap() -> None:
    planner = ChunkPlanner((0, 0, 0), 100, 1, 50)
    planner.observe(1, 0.0)
    assert planner.next_size() == 50


def test_slow_records_make_chunks_of_one_record() -> None:
    planner = ChunkPlanner((0, 0, 0), 100, 1, 50)
    planner.observe(2, 1.0)
    assert planner.next_size() == 1


def test_records_that_wait_are_bounded_in_wall_time_but_never_below_one_round_of_reads() -> None:
    one_by_one = ChunkPlanner((0, 0, 0), 1000, 1, 500)
    one_by_one.observe(1, 0.0, WALL_SECONDS / 5)  # a read waits a fifth of the bound
    assert one_by_one.next_size() == 5
    one_by_one.observe(1, 0.0, 2 * WALL_SECONDS)  # ... or more than all of it: one alone
    assert one_by_one.next_size() == 1
    # Read 16 at once by the read pool: a chunk of 16 waits as long as one record.
    pooled = ChunkPlanner((0, 0, 0), 1000, 1, 500)
    pooled.observe(1, 0.0, 2 * WALL_SECONDS, at_once=16)
    assert pooled.next_size() == 16
    fast = ChunkPlanner((0, 0, 0), 1000, 1, 500)
    fast.observe(32, 0.0, WALL_SECONDS / 5, at_once=16)  # two rounds of a tenth of the bound
    assert fast.next_size() == 160


def test_chunks_are_bounded_in_bytes_by_what_their_outputs_held() -> None:
    planner = ChunkPlanner((0, 0, 0), 10_000, 1, 10_000)
    planner.observe(10, 0.0, 0.0, 10 * CHUNK_BYTES // 100)  # free records of a hundredth of the bound
    assert planner.next_size() == 100
    batches = ChunkPlanner((0, 0, 0), 10_000, 32, 10_000)
    batches.observe(32, 0.0, 0.0, 32 * CHUNK_BYTES // 20)  # images: a batch is past the bound
    assert batches.next_size() == 32  # one batch: never less
    unknown = ChunkPlanner((0, 0, 0), 10_000, 1, 10_000)
    unknown.observe(10, 0.0, 0.0, 0)
    assert unknown.next_size() == 10_000


class Outputs:
    def __init__(self, items: list[object]) -> None:
        self.items = items


def test_output_bytes_are_estimated_from_the_first_output() -> None:
    image = np.zeros((4, 8, 8, 3), np.float32)
    assert output_bytes(Outputs([image, image, image])) == 3 * image.nbytes
    row = {"x": np.int64(1), "tokens": np.arange(5, dtype=np.int32), "text": "abc", "pair": (b"xy", [1.0])}
    assert output_bytes(Outputs([row, row])) == 2 * (8 + 20 + 3 + 2)
    assert output_bytes(Outputs([1, 2, 3])) == output_bytes(Outputs([])) == output_bytes(None) == 0


def test_fused_chunks_hold_whole_batches() -> None:
    planner = ChunkPlanner((0, 0, 0), 100, 4, 30)
    assert planner.next_job() == ChunkJob(0, 4)  # the first chunk is one batch
    planner.observe(4, 1.2 * TARGET_SECONDS)  # 3 records in the target's time: rounded up to one batch
    assert planner.next_size() == 4
    free = ChunkPlanner((0, 0, 0), 100, 4, 30)
    free.observe(4, 0.0)
    assert free.next_size() == 28  # the cap, rounded down to whole batches


def test_the_cap_is_at_least_one_multiple() -> None:
    planner = ChunkPlanner((0, 0, 0), 100, 8, 3)
    planner.observe(1, 0.0)
    assert planner.next_size() == 8


def test_chunks_cover_the_sampler_once_and_stop_at_its_end() -> None:
    planner = ChunkPlanner((5, 0, 0), 23, 1, 6)
    planner.observe(1, 0.0)
    found = jobs(planner)
    assert [(j.start, j.count) for j in found] == [(5, 6), (11, 6), (17, 6)]
    assert planner.peek() == 0
    assert planner.next_job() is None


def test_the_last_chunk_is_what_is_left() -> None:
    planner = ChunkPlanner((0, 0, 0), 10, 4, 8)
    planner.observe(1, 0.0)
    assert [j.count for j in jobs(planner)] == [8, 2]


def test_the_skips_of_a_resumed_position_go_to_the_first_chunk_only() -> None:
    planner = ChunkPlanner((7, 2, 1), None, 1, 4)
    first, second = planner.next_job(), planner.next_job()
    assert first == ChunkJob(7, 1, skip=2, skip_outputs=1)
    assert second == ChunkJob(8, 1)


def test_an_endless_sampler_never_runs_out() -> None:
    planner = ChunkPlanner((0, 0, 0), None, 1, 4)
    planner.observe(1, 0.0)
    for _ in range(100):
        assert planner.next_job() is not None


def program_of(operations: list[object]) -> Program:
    return Program(
        RangeDataSource(0, 40), Walk(IndexSampler(40, num_epochs=1)), compile_operations(operations), 4
    )


class Odd(FilterTransform):
    def filter(self, element: int) -> bool:
        return element % 2 == 1


def test_plan_chunks_gives_each_plan_its_planner_and_tail() -> None:
    planner, tail = plan_chunks(program_of([]), (0, 0, 0), 16)
    assert tail is None
    assert planner.next_job() == ChunkJob(0, 1)
    planner, tail = plan_chunks(program_of([Batch(5)]), (0, 0, 0), 16)
    assert tail is None
    assert planner.next_job() == ChunkJob(0, 5)  # fused: whole batches
    planner, tail = plan_chunks(program_of([Odd(), Batch(5)]), (3, 0, 2), 16)
    assert tail is not None
    assert tail.batch_size == 5
    assert planner.next_job() == ChunkJob(3, 1, skip_outputs=2)  # the tail cuts batches

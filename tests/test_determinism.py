"""Contract 1: the output is a pure function of source, sampler and operations."""

from __future__ import annotations

import pytest

from aioloader import DataLoader, RangeDataSource, ReadOptions
from tests.conftest import repeated
from tests.support.outputs import collect_async
from tests.support.reference import CASE_IDS, CASES, Case, LateEarly, assert_same_outputs, expected


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("workers", [0, 1, 2, 3, 8])
def test_sync_output_matches_the_reference(case: Case, workers: int) -> None:
    assert_same_outputs(list(case.loader(workers)), expected(case))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.asyncio
async def test_async_output_matches_the_reference(case: Case, workers: int) -> None:
    assert_same_outputs(await collect_async(case.loader(workers)), expected(case))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    "options",
    [ReadOptions(num_threads=1, prefetch_buffer_size=1), ReadOptions(num_threads=3, prefetch_buffer_size=7)],
    ids=["tiny-window", "small-window"],
)
def test_output_does_not_depend_on_read_options(case: Case, options: ReadOptions) -> None:
    assert_same_outputs(list(case.loader(2, read_options=options)), expected(case))


@repeated
@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.name in ("fused-batch", "flatmap-batch", "ops-after-batch", "out-of-order-tail")],
    ids=lambda c: c.name,
)
def test_many_workers_many_times(case: Case, repeat: int) -> None:
    assert_same_outputs(
        list(case.loader(8, read_options=ReadOptions(prefetch_buffer_size=40))), expected(case)
    )


@repeated
@pytest.mark.parametrize("name", ["out-of-order", "out-of-order-tail"])
@pytest.mark.parametrize("workers", [2, 3])
def test_the_out_of_order_cases_do_finish_later_chunks_first(name: str, workers: int, repeat: int) -> None:
    """What makes them worth running: a reassembly that delivered chunks as they
    finish, rather than in order, would give other outputs here."""
    case = next(case for case in CASES if case.name == name)
    operations = case.operations(workers)
    loader = DataLoader(
        data_source=RangeDataSource(0, case.num_records),
        sampler=case.sampler(),
        operations=operations,
        worker_count=workers,
    )
    assert_same_outputs(list(loader), expected(case))
    gate = operations[0]
    assert isinstance(gate, LateEarly)
    assert gate.overtaken >= 1, "no record waited for a later chunk to finish"

"""Contract 1: the output is a pure function of source, sampler and operations."""

from __future__ import annotations

import pytest

from aioloader import ReadOptions
from tests.conftest import repeated
from tests.support.outputs import collect_async
from tests.support.reference import CASE_IDS, CASES, Case, assert_same_outputs, expected


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
    [c for c in CASES if c.name in ("fused-batch", "flatmap-batch", "ops-after-batch")],
    ids=lambda c: c.name,
)
def test_many_workers_many_times(case: Case, repeat: int) -> None:
    assert_same_outputs(
        list(case.loader(8, read_options=ReadOptions(prefetch_buffer_size=40))), expected(case)
    )

"""Contract 6: during `async for`, the event loop stays free for other tasks."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from aioloader import Batch, DataLoader, IndexSampler, MapTransform, RangeDataSource
from tests.conftest import repeated


class WaitsForTheLoop(MapTransform):
    """Blocks its thread until a task on the event loop has ticked enough times.

    If the transform ran on the loop, the ticker could never tick: the wait
    would time out and the test fail, instead of hanging.
    """

    def __init__(self, ticked: threading.Event) -> None:
        self.ticked = ticked

    def __deepcopy__(self, memo: dict[int, Any]) -> WaitsForTheLoop:
        return self  # every worker must see the same event

    def map(self, element: Any) -> Any:
        if not self.ticked.wait(timeout=20):
            raise TimeoutError("the event loop was blocked while the transform ran")
        total = 0
        for i in range(20_000):  # and some CPU work that holds the GIL where there is one
            total += i % 7
        return element + total * 0


class RecordsThread(MapTransform):
    def __init__(self, threads: set[int]) -> None:
        self.threads = threads

    def __deepcopy__(self, memo: dict[int, Any]) -> RecordsThread:
        return self

    def map(self, element: Any) -> Any:
        self.threads.add(threading.get_ident())
        return element


@repeated
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.asyncio
async def test_other_tasks_run_while_transforms_execute(workers: int, repeat: int) -> None:
    ticked = threading.Event()
    ticks: list[int] = []

    async def ticker() -> None:
        while True:
            ticks.append(1)
            if len(ticks) >= 5:
                ticked.set()
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    loader = DataLoader(
        data_source=RangeDataSource(0, 64),
        sampler=IndexSampler(64, shuffle=True, seed=1, num_epochs=1),
        operations=[WaitsForTheLoop(ticked), Batch(8)],
        worker_count=workers,
    )
    batches = [batch async for batch in loader]
    task.cancel()
    assert sorted(x for b in batches for x in b.tolist()) == list(range(64))
    assert len(ticks) >= 5


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.asyncio
async def test_user_code_never_runs_on_the_loop_thread(workers: int) -> None:
    threads: set[int] = set()
    loader = DataLoader(
        data_source=RangeDataSource(0, 200),
        sampler=IndexSampler(200, num_epochs=1),
        operations=[RecordsThread(threads), Batch(10)],
        worker_count=workers,
    )
    assert len([b async for b in loader]) == 20
    assert threads
    assert threading.get_ident() not in threads  # the loop's thread


@pytest.mark.asyncio
async def test_async_def_maps_run_on_the_loop() -> None:
    seen: list[int] = []

    async def on_loop(element: int) -> int:
        seen.append(threading.get_ident())
        await asyncio.sleep(0)
        return element * 2

    loader = DataLoader(
        data_source=RangeDataSource(0, 30),
        sampler=IndexSampler(30, num_epochs=1),
        operations=[on_loop],
        worker_count=2,
    )
    out = [x async for x in loader]
    assert out == [2 * x for x in range(30)]
    assert set(seen) == {threading.get_ident()}  # the loop's thread


def test_async_source_with_aget_many_is_used() -> None:
    class Remote:
        def __init__(self) -> None:
            self.calls = 0

        def __len__(self) -> int:
            return 100

        async def aget(self, key: int) -> int:
            raise AssertionError("aget_many should be used")

        async def aget_many(self, keys: list[int]) -> list[int]:
            self.calls += 1
            await asyncio.sleep(0)
            return [k * 3 for k in keys]

    source = Remote()
    loader = DataLoader(data_source=source, sampler=IndexSampler(100, num_epochs=1), worker_count=2)
    assert list(loader) == [k * 3 for k in range(100)]
    assert 1 <= source.calls < 100  # whole chunks, not records


@pytest.mark.asyncio
async def test_iterators_are_async_context_managers() -> None:
    loader = DataLoader(
        data_source=RangeDataSource(0, 5), sampler=IndexSampler(5, num_epochs=1), worker_count=1
    )
    async with aiter(loader) as iterator:
        assert [x async for x in iterator] == [0, 1, 2, 3, 4]

"""Contract 6: during `async for`, the event loop stays free for other tasks."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from types import FrameType
from typing import Any

import pytest

from aioloader import Batch, DataLoader, DevicePut, IndexSampler, MapTransform, RangeDataSource
from tests.conftest import aioloader_threads, repeated, wait_for_no_threads
from tests.support.outputs import adrain, notes
from tests.support.transforms import SlowRecords


class Ticks:
    """A ticker task's count, which worker threads can wait on."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def tick(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def wait_for_a_fresh_one(self) -> bool:
        """Wait for a tick that happens after this call."""
        with self.changed:
            seen = self.count
            return self.changed.wait_for(lambda: self.count > seen, timeout=20)


class WaitsForTheLoop(MapTransform):
    """Blocks its thread until a task on the event loop ticks again, for every record.

    If the transform ran on the loop (or the loop were blocked while it ran),
    the ticker could not tick: the wait would time out and the test fail,
    instead of hanging.
    """

    def __init__(self, ticks: Ticks) -> None:
        self.ticks = ticks

    def __deepcopy__(self, memo: dict[int, Any]) -> WaitsForTheLoop:
        return self  # every worker must see the same ticks

    def map(self, element: Any) -> Any:
        if not self.ticks.wait_for_a_fresh_one():
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
    ticks = Ticks()

    async def ticker() -> None:
        while True:
            ticks.tick()
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    loader = DataLoader(
        data_source=RangeDataSource(0, 64),
        sampler=IndexSampler(64, shuffle=True, seed=1, num_epochs=1),
        operations=[WaitsForTheLoop(ticks), Batch(8)],
        worker_count=workers,
    )
    batches = [batch async for batch in loader]
    task.cancel()
    assert sorted(x for b in batches for x in b.tolist()) == list(range(64))
    assert ticks.count >= 64  # a fresh tick for each record


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


@pytest.mark.parametrize("workers", [0, 2])
def test_an_async_map_that_returns_a_coroutine_unawaited_is_an_error(workers: int) -> None:
    """Never a coroutine taken for data, as from `aget`."""

    async def double(element: int) -> int:
        return element * 2

    async def forgets(element: int) -> Any:
        return double(element) if element == 3 else element * 2

    loader = DataLoader(
        data_source=RangeDataSource(0, 10),
        sampler=IndexSampler(10, num_epochs=1),
        operations=[forgets],
        worker_count=workers,
    )
    got: list[int] = []
    with pytest.raises(TypeError, match=r"returned an awaitable \(coroutine\), not an element") as raised:
        got.extend(int(x) for x in loader)
    assert got == [0, 2, 4]
    assert "index=3, record_key=3" in notes(raised.value)


def outputs_before_reentry(operation: Any, workers: Any, own: dict[str, Any], call: str) -> list[int]:
    """`async for` over 20 records through `operation`, which calls its own iterator
    (`own["iterator"]`, with `own["state"]` its first state) at record 5: the outputs before
    the RuntimeError naming `call`, which must name that record."""

    async def run() -> list[int]:
        loader = DataLoader(
            data_source=RangeDataSource(0, 20),
            sampler=IndexSampler(20, num_epochs=1),
            operations=[operation],
            worker_count=workers,
        )
        iterator = aiter(loader)
        own["iterator"], own["state"] = iterator, iterator.get_state()
        try:
            got, error = await adrain(iterator)
        finally:
            await iterator.aclose()
        assert isinstance(error, RuntimeError)
        assert re.match(rf"AsyncDataLoaderIterator.{call} was called from", str(error))
        assert "index=5, record_key=5" in notes(error)
        return [int(x) for x in got]

    return asyncio.run(run())


@pytest.mark.parametrize("workers", [0, 2])
def test_an_async_map_awaiting_its_own_iterator_is_an_error_at_its_record(workers: int) -> None:
    """It waited for the turn that the `__anext__` awaiting it held (at `worker_count=0`), or
    for outputs that only its own task would make (with workers): a hang."""
    own: dict[str, Any] = {}

    async def calls_its_iterator(element: int) -> int:
        if element == 5:
            await anext(own["iterator"])
        return element

    assert outputs_before_reentry(calls_its_iterator, workers, own, "__anext__") == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_a_map_calling_set_state_of_its_own_async_iterator_is_an_error_at_its_record(workers: Any) -> None:
    """It restarted the run under the `__anext__` running it: at `worker_count=0` the data
    repeated forever, with workers it repeated or ended early, silently."""
    own: dict[str, Any] = {}

    def restarts(element: int) -> int:
        if element == 5:
            own["iterator"].set_state(own["state"])
        return element

    assert outputs_before_reentry(restarts, workers, own, r"set_state\(\)") == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("call", ["next", "set_state"])
def test_an_async_map_calling_its_own_sync_iterator_is_an_error_at_its_record(call: str) -> None:
    """`for` with workers awaits `async def` maps on a loop thread of its own; a `next()` there
    waited for the output that the map itself was making."""
    own: dict[str, Any] = {}

    async def calls_its_iterator(element: int) -> int:
        if element == 5:
            iterator = own["iterator"]
            next(iterator) if call == "next" else iterator.set_state(own["state"])
        return element

    loader = DataLoader(
        data_source=RangeDataSource(0, 20),
        sampler=IndexSampler(20, num_epochs=1),
        operations=[calls_its_iterator],
        worker_count=2,
    )
    got: list[int] = []
    with iter(loader) as iterator:
        own["iterator"], own["state"] = iterator, iterator.get_state()
        with pytest.raises(RuntimeError, match=f"DataLoaderIterator.{call}\\(\\) was called from") as raised:
            got.extend(int(x) for x in iterator)
    assert got == [0, 1, 2, 3, 4]
    assert "index=5, record_key=5" in notes(raised.value)


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


# Leaving `async for` early closes the loader off the loop: the loop keeps
# running while the worker threads finish what they were doing and are joined.


class LoopWatch:
    """Keeps every blocking wait of `threading` (a join, a lock or event wait, a thread's
    start) that the watching thread enters while the watch is on: what freezes an event
    loop that runs on that thread.

    A profile hook of the thread itself sees every call, however short, and reads only its
    own frames: sampling the thread's stack from another thread would walk the frames of a
    running thread, a data race on free-threaded 3.13 (it crashed a CI run).
    """

    WAITS = frozenset({"join", "_wait_for_tstate_lock", "wait", "wait_for"})

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.calls = 0

    def __enter__(self) -> LoopWatch:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        self.calls += 1
        code = frame.f_code
        if code.co_filename.endswith("threading.py") and code.co_name in self.WAITS and self._blocks(frame):
            caller = frame.f_back.f_code.co_qualname if frame.f_back else "?"
            self.seen.add(f"{code.co_name}, called by {caller}")

    @staticmethod
    def _blocks(frame: FrameType) -> bool:
        """Whether the call may block: not a poll such as `is_alive()` (3.11 asks the thread's
        lock with `block=False`) or a wait with a timeout of 0."""
        local = frame.f_locals
        return local.get("block", True) is not False and local.get("timeout") != 0


@repeated
@pytest.mark.parametrize("how", ["break", "aclose", "set_state"])
@pytest.mark.parametrize("device", [False, True], ids=["host", "device"])
@pytest.mark.asyncio
async def test_the_loop_runs_while_the_loader_shuts_down(how: str, device: bool, repeat: int) -> None:
    """The loop's thread never waits for a thread (a join, or even a thread's start),
    and a ticker task keeps ticking while the workers finish a record in progress.

    Why the ticker's gaps are not held to a bound in milliseconds: on this
    2-core machine under the test sessions' load, the loop's thread was seen
    taking 0.1-0.6 s of wall time for 0.5 ms of CPU in `get_state()`, with
    only involuntary context switches (it was runnable, not waiting): the
    machine's stall, not the loader's. What freezes a loop is a wait, and
    that is what the watch looks for, whatever the load.
    """
    beats: list[float] = []

    async def heartbeat() -> None:
        while True:
            beats.append(time.monotonic())
            await asyncio.sleep(0.001)

    slow = SlowRecords(0.4, first=1)
    loader = DataLoader(
        data_source=RangeDataSource(0, 1000),
        sampler=IndexSampler(1000, num_epochs=1),
        operations=[slow],
        worker_count=2,
        device_put=DevicePut() if device else None,
    )
    beat = asyncio.create_task(heartbeat())
    iterator = aiter(loader)
    async for _ in iterator:
        slow.entered.clear()  # a record that starts from now on has its 0.4 s still to run
        while not slow.entered.is_set():
            await asyncio.sleep(0.001)
        break  # stopping waits for that record
    # Polled by `is_alive()`, which takes no lock (`threading.enumerate()` takes the module's).
    workers = aioloader_threads()
    with LoopWatch() as watch:
        started = time.monotonic()
        if how == "aclose":
            await iterator.aclose()
        elif how == "set_state":
            iterator.set_state(iterator.get_state())
            del iterator
        else:
            del iterator  # what leaving `async for` does: the finalizer closes it
        while any(thread.is_alive() for thread in workers):
            await asyncio.sleep(0.001)
        stopped = time.monotonic()
    beat.cancel()
    assert stopped - started > 0.1  # the workers took a while to stop (a record in progress)
    assert watch.calls > 0  # the hook was on
    assert not watch.seen, f"the loop's thread waited in {sorted(watch.seen)}"
    assert len([b for b in beats if started <= b <= stopped]) >= 5, "the ticker did not tick meanwhile"


# An iterator belongs to the event loop it started on.


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_used_under_a_second_asyncio_run_says_so(workers: int) -> None:
    loader = DataLoader(
        data_source=RangeDataSource(0, 100),
        sampler=IndexSampler(100, num_epochs=1),
        operations=[_async_double, Batch(4)],
        worker_count=workers,
    )
    iterator = aiter(loader)

    async def first() -> Any:
        return await anext(iterator)

    async def second() -> Any:
        return [batch async for batch in iterator]

    assert asyncio.run(first()).tolist() == [0, 2, 4, 6]
    with pytest.raises(RuntimeError, match="belongs to another event loop"):
        asyncio.run(second())

    async def again_here() -> list[Any]:
        iterator.set_state(iterator.get_state())  # continues on this loop
        async with iterator:
            return [batch.tolist() async for batch in iterator]

    rest = asyncio.run(again_here())
    assert rest[0] == [8, 10, 12, 14]
    assert len(rest) == 24
    assert wait_for_no_threads() == []


def many_records(workers: int, count: int = 50_000) -> DataLoader:
    """A loader whose chunks hold many outputs each (no batch): a consumer that stops
    part-way leaves some of a chunk loaded, for the next `anext` to take."""
    return DataLoader(
        data_source=RangeDataSource(0, count),
        sampler=IndexSampler(count, num_epochs=1),
        operations=[lambda x: x + 1],
        worker_count=workers,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_under_a_second_asyncio_run_not_one_loaded_output_is_taken(workers: int) -> None:
    """The loop check came only once the loaded chunk was used up: the second loop took
    the rest of it (5 to 160 outputs) before the RuntimeError."""
    iterator = aiter(many_records(workers))

    async def take(count: int) -> list[int]:
        return [await anext(iterator) for _ in range(count)]

    assert asyncio.run(take(1000)) == list(range(1, 1001))
    with pytest.raises(RuntimeError, match="belongs to another event loop"):
        asyncio.run(take(1))

    async def again_here() -> list[int]:
        iterator.set_state(iterator.get_state())
        async with iterator:
            return [element async for element in iterator]

    assert asyncio.run(again_here()) == list(range(1001, 50_001))  # nothing lost, nothing twice


@repeated
def test_two_threads_each_with_its_own_loop_never_share_an_output(repeat: int) -> None:
    """Forbidden use, refused without harm: the thread whose loop is not the iterator's
    gets a RuntimeError before it takes anything, while the other goes on. With the GIL
    off, both took outputs from the loaded chunk at once, one output sometimes twice."""
    count = 50_000
    iterator = aiter(many_records(2, count))
    got: dict[str, list[int]] = {"owner": [], "other": []}
    errors: dict[str, BaseException] = {}
    both_started = threading.Barrier(2, timeout=30)

    async def consume(name: str) -> None:
        if name == "owner":
            got[name] += [await anext(iterator) for _ in range(100)]  # the iterator's loop
        both_started.wait()
        try:
            async for element in iterator:
                got[name].append(element)
        except RuntimeError as error:
            errors[name] = error

    threads = [threading.Thread(target=asyncio.run, args=(consume(name),)) for name in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert "belongs to another event loop" in str(errors["other"])
    assert got["other"] == []
    assert got["owner"] == list(range(1, count + 1))


async def _async_double(element: Any) -> Any:
    await asyncio.sleep(0)
    return element * 2


class CopiedWhere(MapTransform):
    """Records the thread of each copy made of it (one list for all its copies)."""

    def __init__(self, threads: list[str]) -> None:
        self.threads = threads

    def __deepcopy__(self, memo: dict[int, Any]) -> CopiedWhere:
        self.threads.append(threading.current_thread().name)
        return CopiedWhere(self.threads)

    def map(self, element: int) -> int:
        return element


@pytest.mark.parametrize("workers", [2, "auto"])
def test_async_for_makes_no_copy_on_the_event_loop(workers: int | str) -> None:
    """With `for`, the consumer's thread copies the operations once, for the workers to copy
    (it runs them too); with `async for`, only workers run them, and copy them themselves:
    a copy on the loop stalled every other task for its length (3.4 s for a large one)."""
    threads: list[str] = []
    loader = DataLoader(
        data_source=RangeDataSource(0, 64),
        sampler=IndexSampler(64, num_epochs=1),
        operations=[CopiedWhere(threads), Batch(8)],
        worker_count=workers,
    )

    async def main() -> tuple[int, str]:
        async with aiter(loader) as batches:
            return sum([len(batch) async for batch in batches]), threading.current_thread().name

    count, loop_thread = asyncio.run(main())
    assert count == 64
    assert threads
    assert loop_thread not in threads

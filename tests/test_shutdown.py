"""Contract 5: every way of stopping joins every thread the loader started within 2 s."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from aioloader import Batch, DataLoader, DevicePut, IndexSampler, MapTransform, RangeDataSource, ReadOptions
from aioloader._iteration import iterators
from tests.conftest import aioloader_threads, repeated, wait_for_no_threads
from tests.support.reference import CASES, assert_same_outputs, expected
from tests.support.transforms import SlowRecords

REPO = Path(__file__).resolve().parent.parent


class Slow(MapTransform):
    """A transform that takes a little while, so workers are busy when we stop."""

    def map(self, element: Any) -> Any:
        time.sleep(0.002)
        return element


def busy_loader(workers: int = 3) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, 10_000),
        sampler=IndexSampler(10_000, shuffle=True, num_epochs=None, seed=0),
        operations=[Slow(), Batch(4)],
        worker_count=workers,
    )


def assert_all_joined() -> None:
    leftover = wait_for_no_threads(2.0)
    assert not leftover, [t.name for t in leftover]


@repeated
def test_leaving_the_loop_early(repeat: int) -> None:
    for i, _ in enumerate(busy_loader()):
        if i == 3:
            break
    assert_all_joined()


@repeated
def test_close_joins_before_returning(repeat: int) -> None:
    iterator = iter(busy_loader())
    next(iterator)
    assert aioloader_threads()
    iterator.close()
    assert aioloader_threads() == []
    iterator.close()  # idempotent
    with pytest.raises(StopIteration):
        next(iterator)


def test_context_manager_closes() -> None:
    with iter(busy_loader()) as iterator:
        next(iterator)
    assert aioloader_threads() == []


class Gate:
    """A source whose reads wait until the test opens the gate; `entered` is set by the first."""

    def __init__(self) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, key: int) -> int:
        self.entered.set()
        self.opened.wait()
        return key


class StackThread(threading.Thread):
    """A thread that keeps the names of the Python functions it is in, outermost first.

    The thread keeps them itself, with a profile hook, so that a test reads them without
    walking the frames of a running thread from another: on free-threaded 3.13 that walk
    races with the thread popping its frames (it crashed a CI run, later, in a `repr`).
    """

    def __init__(self, target: Callable[[], object], name: str) -> None:
        super().__init__(target=target, name=name)
        self.stack: list[str] = []

    def run(self) -> None:
        sys.setprofile(self._profile)
        try:
            super().run()
        finally:
            sys.setprofile(None)

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            self.stack.append(frame.f_code.co_name)
        elif event == "return" and self.stack:  # not from a frame entered before the hook
            self.stack.pop()


def blocked(thread: StackThread, inside: str) -> bool:
    """Whether `thread` waits (on a lock, an event or a join) inside a call of `inside`, past
    any thread start: read from its stack, so no sleep decides what happened first."""
    names = list(thread.stack)
    return inside in names and "start" not in names and names[-1:] in (["wait"], ["_wait_for_tstate_lock"])


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def wait_until_blocked(thread: StackThread, inside: str) -> None:
    wait_until(lambda: blocked(thread, inside), f"{thread.name} never blocked inside {inside}()")


def closer_done_or_joining(closer: StackThread) -> None:
    """Until `closer` has returned, or waits to join a thread (one stuck in a read)."""
    wait_until(lambda: not closer.is_alive() or blocked(closer, "join"), "close() blocked elsewhere")


def test_close_before_the_first_batch() -> None:
    iterator = iter(busy_loader())
    iterator.close()
    assert aioloader_threads() == []


@repeated
def test_close_while_the_first_chunk_is_in_flight(repeat: int) -> None:
    gate = Gate()
    loader = DataLoader(
        data_source=gate, sampler=IndexSampler(1000, num_epochs=1), operations=[Batch(4)], worker_count=2
    )
    iterator = iter(loader)
    consumer = StackThread(target=lambda: next(iterator, None), name="consumer")
    closer = StackThread(target=iterator.close, name="closer")
    try:
        consumer.start()
        assert gate.entered.wait(30), "the first read never started"
        wait_until_blocked(consumer, "next")  # waiting for the first batch, its chunk stuck in a read
        closer.start()  # from another thread, while the first chunk is in flight
        closer_done_or_joining(closer)  # close() has stopped the pipeline: the read still waits
        assert gate.opened.is_set() is False
    finally:
        gate.opened.set()
    closer.join(2.0)
    consumer.join(2.0)
    assert not closer.is_alive(), "close() hangs"
    assert not consumer.is_alive(), "the pending next() hangs"
    assert_all_joined()  # the thread that was reading too, now that its read returned


class ReadsOnceClosed:
    """A source whose reads wait until `closed()` is true (10 s at most): outputs are ready
    only after a close, when nothing may deliver them any more."""

    def __init__(self, closed: Callable[[], bool]) -> None:
        self.closed, self.deadline = closed, time.monotonic() + 10

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, key: int) -> int:
        wait_until(lambda: self.closed() or time.monotonic() > self.deadline, "")
        return key


class Closer:
    """close() on a thread of its own, started by `begin()` from inside the consumer's next(),
    which goes on once close() has returned or waits in `EngineHolder.take` for its lock.
    `late` lists what happened after close() returned: the threads then alive, and more."""

    def __init__(self, iterator: Any) -> None:
        self.iterator, self.returned, self.late = iterator, threading.Event(), list[Any]()
        self.thread = StackThread(target=self._close, name="closer")

    def _close(self) -> None:
        self.iterator.close()
        self.returned.set()
        self.late.append([t.name for t in aioloader_threads()])

    def begin(self) -> None:
        self.thread.start()
        wait_until(self._began, "close() never began")

    def _began(self) -> bool:
        """close() has returned, or waits in `EngineHolder.take` for its lock."""
        return self.returned.is_set() or self.thread.stack[-1:] == ["take"]

    def after(self, what: Any) -> None:
        if self.returned.is_set():
            self.late.append(what)


def next_beside(iterator: Any, closer: Closer) -> Any:
    """next(iterator) on a consumer thread while `closer` runs; what it returned ("ended" at the end)."""
    outcome: list[Any] = []
    consumer = threading.Thread(target=lambda: outcome.append(next(iterator, "ended")), name="consumer")
    consumer.start()
    consumer.join(15)
    closer.thread.join(15)
    assert not consumer.is_alive(), "next() hangs"
    assert not closer.thread.is_alive(), "close() hangs"
    return outcome[0]


@repeated
@pytest.mark.parametrize("device", [False, True])
def test_close_from_another_thread_while_the_engine_starts(
    device: bool, repeat: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer's first next() is making the engine when close() comes: close() waits
    for it and closes it (no thread outlives close()), and that next() ends the iteration."""
    kwargs: dict[str, Any] = {"device_put": DevicePut()} if device else {}
    iterator = iter(
        DataLoader(
            data_source=ReadsOnceClosed(lambda: iterator._cursor.closed),
            sampler=IndexSampler(1000, num_epochs=1),
            operations=[Batch(4)],
            worker_count=2,
            **kwargs,
        )
    )
    closer, make = Closer(iterator), iterators.sync_engine

    def starting(*args: Any) -> Any:
        closer.begin()  # while the engine is being made
        engine = make(*args)
        closer.after([t.name for t in aioloader_threads()])
        return engine

    monkeypatch.setattr(iterators, "sync_engine", starting)
    assert next_beside(iterator, closer) == "ended", "an output came after close()"
    assert closer.late == [[]], "threads ran on after close() returned"
    assert_all_joined()


@repeated
@pytest.mark.parametrize("workers", [0, 2])
def test_close_from_another_thread_as_outputs_arrive(
    workers: int, repeat: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() comes as the consumer's next() takes in the outputs the engine gave it: either
    they were taken in before (that next() returns the first), or they are dropped; never
    taken in after close() returned."""
    iterator = iter(reads_loader(Reads(0.0), workers))
    closer, load = Closer(iterator), iterators._Cursor.load

    def arriving(cursor: Any, *args: Any) -> Any:
        closer.begin()
        closer.after("outputs taken in after close() returned")
        return load(cursor, *args)

    monkeypatch.setattr(iterators._Cursor, "load", arriving)
    got = next_beside(iterator, closer)
    assert closer.late == [[]]
    assert got.tolist() == wanted_batches(Reads(0.0), 1)[0]
    assert_all_joined()


@repeated
def test_garbage_collection(repeat: int) -> None:
    iterator = iter(busy_loader())
    next(iterator)
    del iterator
    assert_all_joined()


def test_garbage_collection_of_a_reference_cycle() -> None:
    iterator: Any = iter(busy_loader())
    next(iterator)
    iterator.cycle = iterator
    del iterator
    gc.collect()
    assert_all_joined()


@repeated
def test_async_aclose_and_early_exit(repeat: int) -> None:
    # asyncio.run, not pytest-asyncio: the iterator left early is closed when
    # the loop ends (it finalizes its async generators), and that is checked.
    async def run() -> None:
        iterator = aiter(busy_loader())
        await anext(iterator)
        await iterator.aclose()
        assert aioloader_threads() == []
        async for i, _ in _enumerate(busy_loader()):
            if i == 2:
                break

    asyncio.run(run())
    assert_all_joined()


async def _enumerate(loader: DataLoader) -> Any:
    i = 0
    async for item in loader:
        yield i, item
        i += 1


def test_thread_names_say_what_they_are() -> None:
    with iter(busy_loader(2)) as iterator:
        next(iterator)
        names = sorted(t.name for t in aioloader_threads())
    assert names == ["aioloader-worker-0", "aioloader-worker-1"]  # no event loop: nothing to await


async def _double(element: Any) -> Any:
    return element * 2


def test_an_event_loop_thread_runs_only_for_async_segments() -> None:
    loader = DataLoader(
        data_source=RangeDataSource(0, 100),
        sampler=IndexSampler(100, num_epochs=1),
        operations=[_double],
        worker_count=1,
    )
    with iter(loader) as iterator:
        assert next(iterator) == 0
        names = sorted(t.name for t in aioloader_threads())
    assert names[0].startswith("aioloader-loop-")
    assert names[1:] == ["aioloader-worker-0"]
    assert aioloader_threads() == []


CHILD_PRELUDE = """
import atexit, json, os, signal, sys, threading, time
sys.path.insert(0, {repo!r})
from tests.test_shutdown import busy_loader
# What Python installs at start-up, unless its parent ignores SIGINT (as a shell
# does for a command it starts in the background): Ctrl-C must reach the child.
signal.signal(signal.SIGINT, signal.default_int_handler)
def live():
    return [t.name for t in threading.enumerate() if t.name.startswith("aioloader")]
def train_until_interrupted(train, **fields):
    # `train()` until Ctrl-C; then print `fields`, the loader threads still alive up to 2 s
    # later, and SIGINT's handler.
    try:
        train()
    except KeyboardInterrupt:
        deadline = time.monotonic() + 2
        while live() and time.monotonic() < deadline:
            time.sleep(0.01)
        handler = str(signal.getsignal(signal.SIGINT))
        print(json.dumps({{**fields, "live": live(), "handler": handler}}))
"""


def run_child(body: str) -> dict[str, Any]:
    script = CHILD_PRELUDE.format(repo=str(REPO)) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the child (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1])  # type: ignore[no-any-return]


@repeated  # the signal lands at a random point of `next()`: it once deadlocked there
@pytest.mark.parametrize("where", ["waiting-in-next", "in-the-loop-body"])
def test_keyboard_interrupt(where: str, repeat: int) -> None:
    result = run_child(
        f"""
        where = {where!r}
        first = threading.Event()
        def interrupt():
            first.wait()
            os.kill(os.getpid(), signal.SIGINT)
        if where == "waiting-in-next":
            threading.Thread(target=interrupt, daemon=True).start()
        def train():
            for batch in busy_loader():
                first.set()
                if where == "in-the-loop-body":
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)  # the training step, cut short by Ctrl-C
        train_until_interrupted(train, interrupted=True)
        """
    )
    assert result["interrupted"]
    assert result["live"] == []
    assert "default_int_handler" in result["handler"]  # put back once the loader closed


@repeated
def test_keyboard_interrupt_in_the_step_stops_the_read_threads_of_worker_count_0(repeat: int) -> None:
    # At `worker_count=0` a slow source is read on read threads, ahead of the consumer: Ctrl-C
    # during the training step (the iterator kept alive by the traceback) left them running.
    result = run_child(
        """
        import aioloader
        class Slow:
            def __len__(self):
                return 100_000
            def __getitem__(self, key):
                time.sleep(0.002)
                return key
        loader = aioloader.DataLoader(
            data_source=Slow(), sampler=aioloader.IndexSampler(100_000, num_epochs=1),
            operations=[aioloader.Batch(8)],
        )
        reading = []
        def train():
            iterator = iter(loader)  # a local: the traceback keeps it alive
            for i, batch in enumerate(iterator):
                if i == 20:  # the read threads run by now, reading the next chunk
                    reading.extend(live())
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)  # the training step, cut short by Ctrl-C
        train_until_interrupted(train, reading=reading)
        """
    )
    assert result["reading"]  # read threads were there to stop
    assert result["live"] == []
    assert "default_int_handler" in result["handler"]


def test_a_programs_own_sigint_handler_is_left_alone() -> None:
    result = run_child(
        """
        mine = lambda signum, frame: None
        signal.signal(signal.SIGINT, mine)
        with iter(busy_loader()) as iterator:
            next(iterator)
            during = signal.getsignal(signal.SIGINT) is mine
        print(json.dumps({"kept": during and signal.getsignal(signal.SIGINT) is mine}))
        """
    )
    assert result == {"kept": True}


def test_interpreter_exit_with_a_running_loader() -> None:
    result = run_child(
        """
        # Registered first, so it runs last: after the loader's own exit hook.
        atexit.register(lambda: print(json.dumps({"live_at_exit": live()}), flush=True))
        iterator = iter(busy_loader())
        next(iterator)
        sys.exit(0)
        """
    )
    assert result == {"live_at_exit": []}


def test_a_thread_other_than_the_main_one_can_iterate() -> None:
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.extend(len(b) for b in busy_loader_finite()))
    thread.start()
    thread.join()
    assert sum(seen) == 50


def busy_loader_finite() -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, 50),
        sampler=IndexSampler(50, num_epochs=1),
        operations=[Slow(), Batch(8)],
        worker_count=2,
    )


# close() from another thread, and aclose() from another task, while the
# consumer waits: the pending call ends the iteration (StopIteration /
# StopAsyncIteration), nothing is lost or repeated, and every thread ends.


class Reads:
    """Reads that wait: `slow` seconds for the keys in `slow_keys` (all keys if None)."""

    def __init__(self, slow: float, slow_keys: set[int] | None = None, size: int = 10_000) -> None:
        self.slow, self.slow_keys, self.size = slow, slow_keys, size
        self.entered = threading.Event()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        if self.slow_keys is None or key in self.slow_keys:
            self.entered.set()
            time.sleep(self.slow)
        return key * 3


def reads_loader(source: Reads, workers: int, **kwargs: Any) -> DataLoader:
    return DataLoader(
        data_source=source,
        sampler=IndexSampler(source.size, shuffle=True, num_epochs=1, seed=3),
        operations=[Batch(2)],
        worker_count=workers,
        **kwargs,
    )


def wanted_batches(source: Reads, count: int) -> list[list[int]]:
    keys = IndexSampler(source.size, shuffle=True, num_epochs=1, seed=3).record_keys(0, 2 * count)
    return [[3 * keys[2 * b], 3 * keys[2 * b + 1]] for b in range(count)]


def consume_until_the_end(iterator: Any, got: list[list[int]], outcome: list[BaseException | None]) -> None:
    """Take outputs until the iterator ends; record what ended it (None: StopIteration)."""
    try:
        for batch in iterator:
            got.append(batch.tolist())
        outcome.append(None)
    except BaseException as error:
        outcome.append(error)


MOMENTS = {
    # (slow seconds, slow keys, read options, outputs taken before the close)
    "before-the-first-output": (
        0.3,
        {IndexSampler(10_000, shuffle=True, num_epochs=1, seed=3)[0].record_key},
        None,
        0,
    ),
    "mid-chunk": (0.002, None, None, 3),
    "window-full": (0.0, None, ReadOptions(prefetch_buffer_size=4), 1),
}


@repeated
@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("workers", [0, 2])
def test_close_from_another_thread_ends_a_pending_next(moment: str, workers: int, repeat: int) -> None:
    slow, slow_keys, options, before = MOMENTS[moment]
    source = Reads(slow, slow_keys)
    loader = reads_loader(source, workers, read_options=options)
    iterator = iter(loader)
    got: list[list[int]] = []
    outcome: list[BaseException | None] = []
    taken = threading.Event()

    def consume() -> None:
        for batch in itertools.islice(iterator, before):
            got.append(batch.tolist())
        taken.set()
        if moment == "window-full":
            wait_for_no_threads(0.05)  # leave the workers to fill the window (a moment, not a check)
        consume_until_the_end(iterator, got, outcome)

    consumer = threading.Thread(target=consume, name="consumer")
    consumer.start()
    taken.wait(30)
    if before == 0:
        source.entered.wait(30)  # the first read is under way: next() waits for it
    iterator.close()  # from this thread, not the consumer's
    assert aioloader_threads() == []  # close() joined them (it waits 2 s at most)
    consumer.join(2.0)
    assert not consumer.is_alive(), "the pending next() still waits 2 s after close()"
    assert outcome == [None]  # StopIteration, nothing else
    assert got == wanted_batches(source, len(got))  # a prefix: nothing lost, repeated or changed
    state = iterator.get_state()
    assert json.loads(state)["aioloader"]["position"]["index"] == 2 * len(got)  # exactly what next() returned
    with iter(reads_loader(Reads(0.0), 0)) as resumed:
        resumed.set_state(state)
        assert [next(resumed).tolist() for _ in range(3)] == wanted_batches(source, len(got) + 3)[len(got) :]


@pytest.mark.parametrize("workers", [0, 2])
def test_next_after_close_from_another_thread_gives_at_most_what_was_handed_over(workers: int) -> None:
    source = Reads(0.0)
    iterator = iter(reads_loader(source, workers))
    first = next(iterator).tolist()
    closer = threading.Thread(target=iterator.close)
    closer.start()
    closer.join()
    rest = [batch.tolist() for batch in iterator]
    got = [first, *rest]
    assert got == wanted_batches(source, len(got))
    assert len(rest) < 2_500  # not the whole data: at most the outputs handed over before the close
    assert_all_joined()


async def waits_at_0(element: Any) -> Any:
    if element == 0:  # the first chunk: one record
        await asyncio.Event().wait()  # forever, unless cancelled
    return element


async def plain(element: Any) -> Any:
    return element


@repeated
@pytest.mark.parametrize("workers", [0, 2])
def test_aclose_while_anext_waits_ends_it(workers: int, repeat: int) -> None:
    def loader(operation: Any) -> DataLoader:
        return DataLoader(
            data_source=RangeDataSource(0, 20),
            sampler=IndexSampler(20, num_epochs=1),
            operations=[operation],
            worker_count=workers,
        )

    async def run() -> dict[str, Any]:
        iterator = aiter(loader(waits_at_0))
        pending = asyncio.ensure_future(anext(iterator))
        await asyncio.sleep(0.01)  # let it start waiting (a moment, not a check)
        assert not pending.done()
        await iterator.aclose()
        with pytest.raises(StopAsyncIteration):
            await pending
        with pytest.raises(StopAsyncIteration):
            await anext(iterator)
        return iterator.get_state()

    state = asyncio.run(run())
    assert_all_joined()

    async def resume() -> list[Any]:
        resumed = aiter(loader(plain))
        resumed.set_state(state)
        return [x async for x in resumed]

    assert asyncio.run(resume()) == list(range(20))


# Contract 5 with reads (or maps) that wait up to a second each: close() stops
# between two records, not at the end of a chunk sized by CPU time.


@pytest.mark.parametrize("seconds", [0.2, 1.0])
@pytest.mark.parametrize("where", ["read", "map"])
@pytest.mark.parametrize("workers", [0, 2])
def test_close_with_slow_reads_and_maps_is_quick(seconds: float, where: str, workers: int) -> None:
    source = Reads(seconds if where == "read" else 0.0, size=1000)
    slow_map = SlowRecords(seconds)
    loader = DataLoader(
        data_source=source,
        sampler=IndexSampler(1000, num_epochs=1),
        operations=[slow_map] if where == "map" else [],
        worker_count=workers,
    )
    iterator = iter(loader)
    outcome: list[BaseException | None] = []
    got: list[Any] = []
    taken = threading.Event()

    def consume() -> None:
        got.append(next(iterator))  # the first chunk is one record; the next is sized by CPU time
        taken.set()
        try:
            got.extend(iterator)  # single elements, not batches: no consume_until_the_end (.tolist())
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    consumer = threading.Thread(target=consume)
    consumer.start()
    entered = (source if where == "read" else slow_map).entered
    taken.wait(30)
    entered.clear()
    entered.wait(30)  # a read (or map) of the second chunk waits
    iterator.close()  # from another thread than the consumer's
    assert aioloader_threads() == []  # close() joined them (it waits 2 s at most)
    consumer.join(2.0)
    assert not consumer.is_alive(), "the pending next() still waits 2 s after close()"
    assert outcome == [None]
    # `Reads` gives 3 * key, slow or not; the map gives its element back. Usually only the
    # first record comes before close(), but on a loaded machine the second may too.
    assert got == [k * 3 for k in range(len(got))]


# Also holds: iterators dropped half-way lose and repeat nothing, and leave no thread.


def test_a_thousand_iterators_dropped_half_way() -> None:
    case = next(case for case in CASES if case.name == "fused-batch")
    wanted = expected(case)
    rng = random.Random(0)
    for i in range(1000):
        iterator = iter(case.loader(rng.choice([0, 1, 2, 3])))
        count = rng.randrange(1, len(wanted))
        assert_same_outputs([next(iterator) for _ in range(count)], wanted[:count])
        state = iterator.get_state()
        del iterator  # dropped, not closed: the finalizer stops it
        assert len(aioloader_threads()) <= 3, f"iterator {i} left threads behind"
        if i % 50 == 0:
            with iter(case.loader(rng.choice([0, 2]))) as resumed:
                resumed.set_state(state)
                assert_same_outputs(list(resumed), wanted[count:])
    assert_all_joined()


async def waits_after_0(element: Any) -> Any:
    if element > 0:
        await asyncio.Event().wait()  # forever, unless cancelled
    return element


def _others() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[arg-type]


@repeated
@pytest.mark.parametrize("leave", ["drop", "set_state", "aclose"])
def test_leaving_async_iteration_leaves_no_task_running_on_the_loop(
    leave: str, repeat: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task of the loader's left running when the loop closes is destroyed
    # by garbage collection later: "Exception ignored ... Event loop is closed"
    # (pytest-asyncio closes each test's loop). Dropping the iterator or
    # set_state() cancels its tasks on the spot, before anything else runs on
    # the loop; aclose() returns once they are done.
    loader = DataLoader(
        data_source=RangeDataSource(0, 40),
        sampler=IndexSampler(40, num_epochs=1),
        operations=[waits_after_0],
        worker_count=2,
    )

    async def run() -> None:
        iterator = aiter(loader)
        assert await anext(iterator) == 0
        for _ in range(10_000):  # until the workers have handed the loop a later chunk
            if _others():
                break
            await asyncio.sleep(0.001)
        assert _others()
        if leave == "aclose":
            await iterator.aclose()
            assert _others() == set()
            return
        if leave == "set_state":
            iterator.set_state(iterator.get_state())
        del iterator  # the finalizer runs here, on the loop's thread
        assert all(task.cancelling() for task in _others())

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    asyncio.run(run())
    gc.collect()
    assert unraisable == []
    assert_all_joined()


def test_a_device_thread_that_cannot_start_leaves_no_worker_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its workers ran already, and the iterator never had the engine to close: they ran on
    past `close()` (as where a limit on threads is reached)."""
    start = threading.Thread.start

    def refuse_device_threads(thread: threading.Thread) -> None:
        if thread.name.startswith("aioloader-device"):
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_device_threads)
    loader = DataLoader(
        data_source=RangeDataSource(0, 100),
        sampler=IndexSampler(100, num_epochs=1),
        operations=[Batch(2)],
        worker_count=2,
        device_put=DevicePut(),
    )
    with iter(loader) as iterator, pytest.raises(RuntimeError, match="can't start new thread"):
        next(iterator)
    assert wait_for_no_threads() == []


def test_an_unreadable_sigint_handler_leaves_the_loaders_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On 3.11 an `asyncio.run` that failed in its cleanup left SIGINT's handler such that
    `signal.getsignal` raised: every loader with workers failed at its first `next()`."""
    import signal

    def unreadable(signum: int) -> Any:
        raise RuntimeError("repr broken")

    monkeypatch.setattr(signal, "getsignal", unreadable)
    loader = DataLoader(
        data_source=RangeDataSource(0, 10), sampler=IndexSampler(10, num_epochs=1), worker_count=2
    )
    assert [int(x) for x in loader] == list(range(10))
    assert wait_for_no_threads() == []

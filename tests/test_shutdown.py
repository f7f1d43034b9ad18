"""Contract 5: every way of stopping joins every thread the loader started within 2 s."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aioloader import Batch, DataLoader, IndexSampler, MapTransform, RangeDataSource
from tests.conftest import aioloader_threads, repeated, wait_for_no_threads

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


def stack(thread: threading.Thread) -> list[str]:
    """The names of the functions `thread` is in, outermost first."""
    frame, names = sys._current_frames().get(thread.ident or -1), []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names[::-1]


def blocked(thread: threading.Thread, inside: str) -> bool:
    """Whether `thread` waits (on a lock, an event or a join) inside a call of `inside`, past
    any thread start: read from its stack, so no sleep decides what happened first."""
    names = stack(thread)
    return inside in names and "start" not in names and names[-1] in {"wait", "_wait_for_tstate_lock"}


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def wait_until_blocked(thread: threading.Thread, inside: str) -> None:
    wait_until(lambda: blocked(thread, inside), f"{thread.name} never blocked inside {inside}()")


def closer_done_or_joining(closer: threading.Thread) -> None:
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
    consumer = threading.Thread(target=lambda: next(iterator, None), name="consumer")
    closer = threading.Thread(target=iterator.close, name="closer")
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
        try:
            train()
        except KeyboardInterrupt:
            deadline = time.monotonic() + 2
            while live() and time.monotonic() < deadline:
                time.sleep(0.01)
            handler = str(signal.getsignal(signal.SIGINT))
            print(json.dumps({{"interrupted": True, "live": live(), "handler": handler}}))
        """
    )
    assert result["interrupted"]
    assert result["live"] == []
    assert "default_int_handler" in result["handler"]  # put back once the loader closed


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

"""Waking one consumer that waits either in a thread or on an event loop.

The pipeline and the device hand-off both have a single consumer, which is a
thread for `for` and a coroutine for `async for`. Both wait on their owner's
lock: a thread on a `Condition` of it, a coroutine on a future armed under it
and resolved from whichever thread calls `wake`.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio


class Wakeup:
    """A consumer's wait under `lock`; every method must be called holding it.

    The lock is reentrant for what it can tell: which thread holds it (see `wait`).
    """

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._condition = threading.Condition(lock)
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def wait(self) -> None:
        """Wait in this thread until `wake` (releasing the lock meanwhile)."""
        try:
            self._condition.wait()
        except BaseException:
            # Ctrl-C's KeyboardInterrupt may land inside `Condition.wait` right after it let
            # go of the lock, before its own `try` takes it back (its Python code, between
            # two bytecodes): take it back here, so that the caller's `with` lets go of it
            # once and the interrupt goes on (it was "RuntimeError: release unlocked lock").
            if not _owned(self._lock):
                self._lock.acquire()
            raise

    def arm(self) -> asyncio.Future[None]:
        """A future of the running loop that `wake` resolves: await it after releasing the lock."""
        import asyncio

        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiter = (loop, waiter)
        return waiter

    def wake(self) -> None:
        """Wake the consumer, wherever it waits."""
        self._condition.notify()
        if self._waiter is not None:
            loop, waiter = self._waiter
            self._waiter = None
            with contextlib.suppress(RuntimeError):  # a closed loop has no consumer left
                loop.call_soon_threadsafe(_set, waiter)


def _owned(lock: threading.RLock) -> bool:
    """True when the calling thread holds `lock` (an RLock knows its owner)."""
    owned: bool = getattr(lock, "_is_owned")()  # noqa: B009 (no public name for it)
    return owned


def _set(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

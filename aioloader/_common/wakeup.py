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
    """A consumer's wait under `lock`; every method must be called holding it."""

    def __init__(self, lock: threading.Lock) -> None:
        self._condition = threading.Condition(lock)
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def wait(self) -> None:
        """Wait in this thread until `wake` (releasing the lock meanwhile)."""
        self._condition.wait()

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


def _set(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

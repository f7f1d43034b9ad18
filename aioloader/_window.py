"""The bound on work in flight: a weighted, closable semaphore for the event loop."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import NamedTuple


class WindowStatistics(NamedTuple):
    """A snapshot of a window: what it holds now, its size, and the most it held."""

    in_use: int
    capacity: int
    peak: int


class WindowClosedError(Exception):
    """Raised to a waiter when the window is closed while it waits."""


class Window:
    """At most `capacity` units (records or batches) in flight; loop-only, not thread-safe.

    A request bigger than the capacity is granted when nothing else is in
    flight, so that one oversized unit of work cannot deadlock the pipeline.
    Waiters are served first come, first served.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._in_use = self._peak = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._closed = False

    def _fits(self, weight: int) -> bool:
        return self._in_use == 0 or self._in_use + weight <= self.capacity

    async def acquire(self, weight: int) -> None:
        """Wait until `weight` more units fit, then take them."""
        if self._closed:
            raise WindowClosedError("the window is closed")
        if not self._waiters and self._fits(weight):
            self._take(weight)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((weight, waiter))
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(weight)  # granted, then cancelled before we could use it
            raise
        finally:
            if (weight, waiter) in self._waiters:
                self._waiters.remove((weight, waiter))

    def release(self, weight: int) -> None:
        """Give back `weight` units and wake the waiters that now fit."""
        self._in_use -= weight
        while self._waiters and self._fits(self._waiters[0][0]):
            weight, waiter = self._waiters.popleft()
            if not waiter.done():
                self._take(weight)
                waiter.set_result(None)

    def _take(self, weight: int) -> None:
        self._in_use += weight
        self._peak = max(self._peak, self._in_use)

    def close(self) -> None:
        """Fail every waiter and every later `acquire`."""
        self._closed = True
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(WindowClosedError("the window is closed"))

    def statistics(self) -> WindowStatistics:
        """What the window holds now, its capacity, and the most it has held."""
        return WindowStatistics(self._in_use, self.capacity, self._peak)

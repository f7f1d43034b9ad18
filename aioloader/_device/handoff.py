"""A bounded hand-off between one producer thread and one consumer (a thread or a loop).

`put` blocks the producer while `capacity` items wait; the consumer takes
them with `get` (blocking) or `aget` (awaiting, without blocking its loop).
`close` wakes both sides: a closed hand-off refuses new items and, once the
waiting ones are taken, answers the end (None).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, NamedTuple, TypeVar

from aioloader._common.wakeup import Wakeup

T = TypeVar("T")


class HandoffStatistics(NamedTuple):
    """A snapshot: items waiting now, the capacity, the most that ever waited."""

    waiting: int
    capacity: int
    peak: int


class Handoff(Generic[T]):
    """At most `capacity` items between a producer and a consumer, in order."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._lock = threading.RLock()  # it knows its owner: see `Wakeup.wait`
        self._not_full = threading.Condition(self._lock)
        self._not_empty = Wakeup(self._lock)
        self._closed = False
        self._peak = 0

    def put(self, item: T) -> bool:
        """Add `item`, waiting for room; False (item dropped) if the hand-off is closed."""
        with self._lock:
            while len(self._items) >= self.capacity and not self._closed:
                self._not_full.wait()
            if self._closed:
                return False
            self._items.append(item)
            self._peak = max(self._peak, len(self._items))
            self._not_empty.wake()
            return True

    def room(self) -> int:
        """How many items `put` would take now without waiting."""
        with self._lock:
            return self.capacity - len(self._items)

    def get(self) -> T | None:
        """The next item (blocking); None once closed and empty."""
        with self._lock:
            while not self._items and not self._closed:
                self._not_empty.wait()
            return self._take()

    async def aget(self) -> T | None:
        """`get` for a consumer on an event loop."""
        while True:
            with self._lock:
                if self._items or self._closed:
                    return self._take()
                waiter = self._not_empty.arm()
            await waiter

    def _take(self) -> T | None:
        if not self._items:
            return None
        item = self._items.popleft()
        self._not_full.notify()
        return item

    def close(self, drop: bool = False) -> None:
        """Refuse new items and wake both sides; `drop` also discards the waiting ones."""
        with self._lock:
            self._closed = True
            if drop:
                self._items.clear()
            self._not_full.notify_all()
            self._not_empty.wake()

    def statistics(self) -> HandoffStatistics:
        """Items waiting now, the capacity, and the most that ever waited."""
        with self._lock:
            return HandoffStatistics(len(self._items), self.capacity, self._peak)

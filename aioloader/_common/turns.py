"""Turns for the tasks that await one async iterator at once.

An iterator is one stream with one consumer's wait at a time (a `Wakeup` keeps one
waiter): tasks that await `__anext__` together must take turns, or the second one's
wait replaces the first one's, which then waits for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio


class TaskTurns:
    """An `asyncio.Lock` of the running loop, made anew if the iterator moves to another
    loop (`set_state` restarts it there)."""

    def __init__(self) -> None:
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def lock(self) -> asyncio.Lock:
        import asyncio

        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = loop, asyncio.Lock()
        return self._lock[1]

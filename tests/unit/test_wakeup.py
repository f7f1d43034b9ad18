"""`Wakeup.wait` and Ctrl-C: the interrupt goes on, the lock is let go of once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from aioloader._common.wakeup import Wakeup


def test_an_interrupt_just_after_the_wait_let_go_of_the_lock_is_raised_as_itself() -> None:
    """A KeyboardInterrupt between `Condition.wait` letting go of the lock and its `try`
    (Python code, a signal's handler may run there): the caller's `with` released a lock
    it no longer held, and a RuntimeError hid the interrupt (seen once in CI, 3.13t)."""
    lock = threading.RLock()
    wakeup = Wakeup(lock)
    real = wakeup._condition._release_save  # type: ignore[attr-defined]

    def released_then_interrupted() -> Any:
        real()
        raise KeyboardInterrupt

    wakeup._condition._release_save = released_then_interrupted  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt), lock:
        wakeup.wait()
    assert lock.acquire(blocking=False)  # let go of once: free now
    lock.release()


def test_an_interrupt_while_waiting_leaves_the_lock_as_the_caller_had_it() -> None:
    lock = threading.RLock()
    wakeup = Wakeup(lock)

    def interrupted() -> Any:
        raise KeyboardInterrupt

    wakeup._condition._waiters = _Raising(interrupted)  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt), lock:
        wakeup.wait()
    assert lock.acquire(blocking=False)
    lock.release()


class _Raising(list[Any]):
    """A waiters list whose `append` raises: an interrupt before the lock is let go of."""

    def __init__(self, raising: Any) -> None:
        super().__init__()
        self._raising = raising

    def append(self, item: Any) -> None:
        self._raising()

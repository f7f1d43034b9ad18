"""Records that count themselves: how many are alive, and how many the pipeline holds.

For the memory bound. Module-level, so that subinterpreters load them by
reference; each interpreter counts its own (a subinterpreter has its own
copy of this module).
"""

from __future__ import annotations

import gc
import threading


class Ledger:
    """Records alive in this interpreter, and how many it holds now (made here, not yet delivered)."""

    # Reentrant: on free-threaded CPython a queued `__del__` can run while the lock is held.
    lock = threading.RLock()
    held = peak = alive = 0

    @classmethod
    def change(cls, held: int = 0, alive: int = 0) -> None:
        with cls.lock:
            cls.held += held
            cls.alive += alive
            cls.peak = max(cls.peak, cls.held)

    @classmethod
    def start(cls) -> None:
        gc.collect()
        assert cls.alive == 0, f"{cls.alive} records alive before the test"
        with cls.lock:
            cls.held = cls.peak = 0


class Tracked:
    """A record counted where it is made; it crosses by being made again (`__reduce__`)."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value
        Ledger.change(held=+1, alive=+1)

    def __reduce__(self) -> tuple[type[Tracked], tuple[int]]:
        return Tracked, (self.value,)

    def __del__(self) -> None:
        Ledger.change(alive=-1)


class TrackedSource:
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, key: int) -> Tracked:
        return Tracked(key)


def bound(window: int, workers: int, per_output: int = 1, worker_buffer_size: int = 1) -> int:
    """`DataLoader`'s bound on records held: the prefetch buffer (`window`), plus
    `worker_buffer_size` finished outputs of `per_output` records for each worker."""
    return window + workers * worker_buffer_size * per_output

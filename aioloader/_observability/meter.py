"""Counters that one thread writes and any thread reads: no lock, no shared hot spot.

Every thread of a loader that does work (a worker, the event loop, the
device thread, the consumer) owns one `Meter` and is the only one to write
it, so counting costs a few attribute updates and never makes threads
contend (on free-threaded CPython a counter shared by threads would bounce
between cores). A reader sums the meters of a `Meters` registry when asked:
the figures are a moment's view, each one at most a chunk old, never torn
into garbage (each is a float or an int, replaced whole), and read downstream
first, so that no stage is seen ahead of the one before it.

`AIOLOADER_STATISTICS=0` in the environment switches the step timing off
(for measuring what counting costs); the stages then show no items and no time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable

ENABLED = os.environ.get("AIOLOADER_STATISTICS", "1") != "0"


class Meter:
    """One thread's counters: per step, items out and seconds busy; and its waits.

    `waiting_for_input` is time spent waiting for something to work on;
    `waiting_for_room` is time spent waiting because the next stage is full.
    Only the owning thread writes; `copy_steps` may be called from any thread.
    """

    __slots__ = ("role", "steps", "waiting_for_input", "waiting_for_room")

    def __init__(self, role: str) -> None:
        self.role = role
        self.steps: dict[Hashable, list[float]] = {}
        self.waiting_for_input = 0.0
        self.waiting_for_room = 0.0

    def count(self, key: Hashable, items: int, seconds: float) -> None:
        """Step `key` gave `items` in `seconds` (the owning thread only)."""
        entry = self.steps.get(key)
        if entry is None:
            entry = self.steps[key] = [0, 0.0, 0]
        entry[0] += items
        entry[1] += seconds
        entry[2] += 1

    def copy_steps(self) -> dict[Hashable, tuple[float, float, float]]:
        """Per step: (items, seconds, calls), copied so the owner may go on counting.

        The owner counts a chunk's steps in pipeline order, upstream first; copied in
        the reverse order, a step is never seen ahead of the steps before it (a map
        with more items than the read before it), though the owner counts meanwhile."""
        entries = list(dict(self.steps).items())
        copied = {key: (entry[0], entry[1], entry[2]) for key, entry in reversed(entries)}
        return {key: copied[key] for key, _ in entries}


class Meters:
    """The meters of one engine's threads; `new` is the only locked call (once per thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meters: list[Meter] = []

    def new(self, role: str) -> Meter:
        """A meter for the calling thread, counted in every later `all()`."""
        meter = Meter(role)
        with self._lock:
            self._meters.append(meter)
        return meter

    def all(self) -> list[Meter]:
        """Every meter made so far."""
        with self._lock:
            return list(self._meters)

"""The bound on work in flight: a weighted count with a capacity.

A `Window` has no lock of its own: the pipeline changes it under the
pipeline's lock, together with the queues it guards.
"""

from __future__ import annotations

from typing import NamedTuple


class WindowStatistics(NamedTuple):
    """A snapshot of a window: what it holds now, its size, and the most it held."""

    in_use: int
    capacity: int
    peak: int


class Window:
    """At most `capacity` weight in flight; a job's weight is its records, or its batches.

    A request bigger than the capacity fits when nothing else is in flight,
    so that one oversized job cannot stall the pipeline.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._in_use = self._peak = 0

    @property
    def in_use(self) -> int:
        """The weight in flight now."""
        return self._in_use

    def fits(self, weight: int) -> bool:
        """True when `weight` more may be taken now."""
        return self._in_use == 0 or self._in_use + weight <= self.capacity

    def take(self, weight: int) -> None:
        """Count `weight` more in flight (after `fits`)."""
        self._in_use += weight
        self._peak = max(self._peak, self._in_use)

    def release(self, weight: int) -> None:
        """Count `weight` as no longer in flight."""
        self._in_use -= weight

    def statistics(self) -> WindowStatistics:
        """What the window holds now, its capacity, and the most it has held."""
        return WindowStatistics(self._in_use, self.capacity, self._peak)

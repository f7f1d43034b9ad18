"""Ordered reassembly: results that finish in any order, taken in sequence order.

Jobs get consecutive sequence numbers when they are issued; whichever worker
finishes one puts its result here, and the consumer takes results strictly in
sequence. Like `Window`, it has no lock of its own: the pipeline guards it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

R = TypeVar("R")


class OrderedResults(Generic[R]):
    """A reorder buffer: `put` in any order, `take` in sequence order."""

    def __init__(self) -> None:
        self._done: dict[int, tuple[R, int]] = {}
        self.next = 0  # the sequence number `take` returns next

    def put(self, seq: int, result: R, weight: int) -> None:
        """Store the result of job `seq` and its window weight."""
        self._done[seq] = (result, weight)

    def ready(self) -> bool:
        """True when the next result in sequence is here."""
        return self.next in self._done

    def take(self) -> tuple[R, int]:
        """The next result in sequence and its weight (after `ready`)."""
        item = self._done.pop(self.next)
        self.next += 1
        return item

    def clear(self) -> None:
        """Drop every stored result (the pipeline is closing)."""
        self._done.clear()

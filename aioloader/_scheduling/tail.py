"""The ordered tail: batch boundaries for the tail plan, cut in output order.

After a filter or a flat-map nobody knows in advance which records a batch
holds, so the elements of stage 1 arrive here in order and are cut into
batches of `batch_size`. Cutting only slices lists; stacking and the
operations after `Batch` are user code and go back to the workers as
`BatchJob`s. The class is plain (no asyncio) so the inline mode uses it too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioloader._common.positions import Position
from aioloader._operations.batching import BatchPlan
from aioloader._operations.transforms import Batch
from aioloader._program.jobs import BatchJob, Elements


class TailBatcher:
    """Cuts an ordered stream of `Elements` into `BatchJob`s."""

    def __init__(self, batch: Batch, skip_outputs: int = 0) -> None:
        self._size, self._drop_remainder = batch.batch_size, batch.drop_remainder
        self._skip_outputs = skip_outputs  # for the first batch after a resume
        self._items: list[Any] = []
        self._before: list[Position] = []
        self._after: list[Position] = []
        self._indices: list[int] = []
        self._rngs: list[np.random.Generator | None] = []
        self.failed = False

    @property
    def buffered(self) -> int:
        """Elements waiting for their batch to fill."""
        return len(self._items)

    def push(self, elements: Elements) -> list[BatchJob]:
        """Take the next elements; return the jobs for the batches now complete.

        A failure in `elements` ends the stream: the batches completed before
        it are returned, then a job that carries only the failure.
        """
        self._items += elements.items
        self._before += elements.before
        self._after += elements.after
        self._indices += elements.indices
        self._rngs += elements.rngs
        jobs = self._cut(len(self._items) // self._size * self._size)
        if elements.failure is not None:
            self.failed = True
            jobs.append(BatchJob(_empty_plan(), failure=elements.failure))
        return jobs

    def finish(self) -> list[BatchJob]:
        """The last, short batch, unless `drop_remainder` (or nothing is left)."""
        if self.failed or not self._items or self._drop_remainder:
            return []
        return self._cut(len(self._items))

    def clear(self) -> None:
        """Drop every buffered element (the pipeline is closing)."""
        for column in (self._items, self._before, self._after, self._indices, self._rngs):
            column.clear()

    def _cut(self, count: int) -> list[BatchJob]:
        if count == 0:
            return []
        bounds = [(b, min(b + self._size, count)) for b in range(0, count, self._size)]
        first_before = self._before[0]
        plan = BatchPlan(
            groups=[self._items[b:e] for b, e in bounds],
            before=[self._before[b] for b, _ in bounds],
            after=[self._after[e - 1] for _, e in bounds],
            first=[self._indices[b] for b, _ in bounds],
            last=[self._indices[e - 1] for _, e in bounds],
            last_rng=[self._rngs[e - 1] for _, e in bounds],
        )
        plan.before[0] = (first_before[0], first_before[1], self._skip_outputs)
        job = BatchJob(plan, skip_outputs=self._skip_outputs)
        self._skip_outputs = 0
        for column in (self._items, self._before, self._after, self._indices, self._rngs):
            del column[:count]
        return [job]


def _empty_plan() -> BatchPlan:
    return BatchPlan([], [], [], [], [], [])

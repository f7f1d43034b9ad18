"""The ordered tail: batch boundaries for the tail plan, cut in output order.

After a filter or a flat-map nobody knows in advance which records a batch
holds, so the elements of the `RECORDS` stage arrive here in order and are
cut into batches of `batch_size` (by `BatchPlan.cut`, as the fused plan's
are). Cutting only slices lists; stacking and the operations after `Batch`
are user code and go back to the workers as `BatchJob`s. The class is plain
(no lock, no asyncio): the scheduler calls it under its lock, and the inline
driver in the caller's thread.
"""

from __future__ import annotations

from aioloader._operations.batching import BatchPlan
from aioloader._operations.transforms import Batch
from aioloader._program.jobs import BatchJob, Elements


class TailBatcher:
    """Cuts an ordered stream of `Elements` into `BatchJob`s."""

    def __init__(self, batch: Batch, skip_outputs: int = 0) -> None:
        self.batch_size, self._drop_remainder = batch.batch_size, batch.drop_remainder
        self._skip_outputs = skip_outputs  # for the first batch after a resume
        self._buffer = Elements([], [], [], [], [], None)  # less than one batch, between pushes
        self.failed = False

    @property
    def buffered(self) -> int:
        """Elements waiting for their batch to fill."""
        return len(self._buffer.items)

    def push(self, elements: Elements) -> list[BatchJob]:
        """Take the next elements; return the jobs for the batches now complete.

        A failure in `elements` ends the stream: the batches completed before
        it are returned, then a job that carries only the failure.
        """
        for column, more in zip(self._buffer.columns(), elements.columns(), strict=True):
            column += more
        jobs = self._cut(self.buffered // self.batch_size * self.batch_size)
        if elements.failure is not None:
            self.failed = True
            jobs.append(
                BatchJob(BatchPlan.cut([], 0, self.batch_size, self._buffer, 0), failure=elements.failure)
            )
        return jobs

    def finish(self) -> list[BatchJob]:
        """The last, short batch, unless `drop_remainder` (or nothing is left)."""
        if self.failed or not self.buffered or self._drop_remainder:
            return []
        return self._cut(self.buffered)

    def clear(self) -> None:
        """Drop every buffered element (the pipeline is closing)."""
        for column in self._buffer.columns():
            column.clear()

    def _cut(self, count: int) -> list[BatchJob]:
        if count == 0:
            return []
        buffer = self._buffer
        plan = BatchPlan.cut(buffer.items, count, self.batch_size, buffer, self._skip_outputs)
        job = BatchJob(plan, skip_outputs=self._skip_outputs)
        self._skip_outputs = 0
        for column in buffer.columns():
            del column[:count]
        return [job]

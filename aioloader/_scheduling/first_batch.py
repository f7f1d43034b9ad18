"""The first batch in parts: every thread that asks for work makes some of it.

Nothing comes out of a fused plan before its first chunk, one batch, is
done. Made on one thread, a batch of 32 PNG decodes kept the consumer
waiting 23 ms while the other workers started and waited; on 16 cores, a
batch of 256 JPEG decodes would keep 15 of them idle. So the scheduler
cuts the first batch in parts, a few for each worker, which any thread
that asks for work takes: the workers, and the consumer's thread while it
waits (it runs jobs itself while the workers start, see `Scheduler.get`),
never more of them at once than `worker_count` (no more threads than that
ever run the user's code at once). Each part runs the tail plan's first
stage (records to `Elements`, `Stage.PARTS`); a `TailBatcher` cuts the
parts' elements, in order, into the batch that the fused chunk would have
made (`BatchPlan.cut` of the same elements, their generators made from the
same indices), which one thread stacks (`Stage.JOIN`). The output does not
depend on which thread runs which part, nor on how many parts there are.
At 2 workers, 32 PNG decodes came in 16.9 ms instead of 24.6 (3.13t).

Only a fresh start is cut: a resume inside a batch (`skip`,
`skip_outputs`) takes the fused path, as does a program with asynchronous
segments (their reads are concurrent within a chunk already). The class is
plain; the scheduler calls it under its lock.
"""

from __future__ import annotations

from collections import deque

from aioloader._operations.batching import BatchPlan
from aioloader._operations.transforms import Batch
from aioloader._program.jobs import BatchJob, ChunkJob, Elements
from aioloader._program.program import Stage
from aioloader._scheduling.tail import TailBatcher
from aioloader._scheduling.work import Work

# Parts for each thread: threads that start late, or share a core, take fewer of them.
PARTS_PER_THREAD = 2


class FirstBatch:
    """The parts of a first chunk (`job`, at most one batch), then its join, for at most
    `threads` threads at once; see the module docstring. `todo` holds the work no thread
    has taken yet."""

    def __init__(self, job: ChunkJob, parts: int, batch: Batch, threads: int) -> None:
        self.weight = job.count  # the chunk's weight in the records window
        self._batch, self._threads = batch, threads
        self._running = 0  # parts (or the join) taken and not done
        self._elements: list[Elements | None] = [None] * parts
        self._joining = False  # the join is issued: parts still running are not waited for
        self._seconds = self._wall = 0.0
        size, extra = divmod(job.count, parts)
        self.todo: deque[Work] = deque()
        start = job.start
        for part in range(parts):
            count = size + (part < extra)
            self.todo.append(Work(Stage.PARTS, part, ChunkJob(start, count), 0))
            start += count

    @staticmethod
    def parts(job: ChunkJob, threads: int) -> int:
        """How many parts `job` is cut in for `threads` workers (1: not cut, see the module docstring)."""
        if job.skip or job.skip_outputs or threads < 2:
            return 1
        return min(PARTS_PER_THREAD * threads, job.count)  # a chunk holds one record at least

    def take(self, consumer: bool = False) -> Work | None:
        """A part, or the join once the parts it needs are done; None if none is waiting,
        or if `threads` threads run one already.

        The `consumer`'s thread takes a part only once every part before it is done:
        a part it runs holds the consumer until it ends, and an earlier part that failed
        makes its records ones the batch made whole never reaches (a record stuck there
        would hold the error back)."""
        if not self.todo or self._running >= self._threads:
            return None
        head = self.todo[0]
        if consumer and head.stage is Stage.PARTS and None in self._elements[: head.seq]:
            return None
        self._running += 1
        return self.todo.popleft()

    def done(self, work: Work) -> Work | None:
        """Note that `work` (a part, or the join) ran to its end. Returns, after the join,
        the first chunk's work as the fused plan would have completed it (job 0 of the
        records stage, with the CPU and wall time of every part); None before."""
        self._running -= 1
        self._seconds += work.seconds
        self._wall += work.wall
        if work.stage is Stage.JOIN:
            whole = Work(Stage.RECORDS, 0, work.payload, self.weight)
            whole.seconds, whole.wall = self._seconds, self._wall
            return whole
        self._elements[work.seq] = work.payload
        if not self._joining and self._complete():
            # The parts after a failed one are not needed (their records come after the
            # failing one): those not taken are dropped, those running not waited for, so
            # that the error comes as soon as in a fused chunk, whatever they do.
            self._joining = True
            self.todo.clear()
            self.todo.append(Work(Stage.JOIN, 0, self._join(), self.weight))
        return None

    def _complete(self) -> bool:
        """True once every part is done, or every part up to a failed one."""
        for elements in self._elements:
            if elements is None:
                return False
            if elements.failure is not None:
                return True
        return True

    def _join(self) -> BatchJob:
        """The batch of the parts' elements, in order: the parts after a failed one are not
        looked at (their records come after the failing one, as in a fused chunk)."""
        tail = TailBatcher(self._batch)
        jobs: list[BatchJob] = []
        for elements in self._elements:
            assert elements is not None, "the parts up to a failed one are done"
            jobs += tail.push(elements)
            if tail.failed:
                break
        jobs += tail.finish()
        assert len(jobs) <= 1, "a first chunk holds one batch at most"
        # None: a short batch with `drop_remainder` (the sampler ended within it), no output.
        return jobs[0] if jobs else BatchJob(BatchPlan.empty())

"""The concurrent pipeline on one event loop: the DESIGN.md diagram, assembled.

    sampler -> ChunkPlanner -> Reassembly(stage 1 on the executor)
            [-> TailBatcher -> Reassembly(stage 2 on the executor)]   (tail plan only)
            -> Outputs for the consumer

Every coroutine here runs on the loop and only coordinates: reading, the
user's operations and stacking run on the executor's threads; only `async
def` maps and async sources are awaited on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from aioloader._options import ReadOptions
from aioloader._planner import ChunkPlanner
from aioloader._positions import Position
from aioloader._program import BatchJob, ChunkJob, Elements, Outputs, Plan, Program
from aioloader._reassembly import Reassembly
from aioloader._tail import TailBatcher
from aioloader._window import Window


class Executor(Protocol):
    """Runs one synchronous segment of the program off the loop."""

    async def run(self, stage: int, segment: int, payload: Any) -> tuple[Any, float]: ...

    def close(self, timeout: float = 2.0) -> bool: ...

    async def aclose(self, timeout: float = 2.0) -> bool: ...


class Pipeline:
    """Outputs in order, computed ahead within the bounds of `read_options`."""

    def __init__(
        self,
        program: Program,
        executor: Executor,
        position: Position,
        read_options: ReadOptions,
        workers: int,
    ) -> None:
        self._program, self._executor = program, executor
        batch = program.operations.batch
        capacity = read_options.prefetch_buffer_size
        unit = batch.batch_size if program.plan is Plan.FUSED and batch is not None else 1
        # Several chunks per worker must fit in the window, or workers starve.
        self._planner = ChunkPlanner(position, program.sampler.length, unit, capacity // (workers + 1))
        self._first_measured = asyncio.Event()
        self._records: Reassembly[ChunkJob, Any] = Reassembly(
            self._chunk_jobs(), self._run_chunk, Window(capacity)
        )
        self._batches: Reassembly[BatchJob, Outputs] | None = None
        if program.plan is Plan.TAIL and batch is not None:
            self._tail = TailBatcher(batch, position[2])
            window = Window(max(1, capacity // batch.batch_size))
            self._batches = Reassembly(self._batch_jobs(), self._run_batches, window)

    @property
    def final(self) -> Reassembly[Any, Any]:
        """The stage whose results the consumer receives."""
        return self._batches or self._records

    async def next(self) -> tuple[Outputs, int] | None:
        """The next outputs and their weight, or None at the end.

        The caller hands the weight back with `release` once it has delivered
        the outputs; until then they count against the prefetch window.
        """
        return await self.final.next()

    def release(self, weight: int) -> None:
        """Give back the window units of outputs the consumer is done with (on the loop)."""
        self.final.window.release(weight)

    async def aclose(self) -> None:
        """Cancel every stage and drop what they buffer; the executor is closed by its owner."""
        for stage in (self._batches, self._records):
            if stage is not None:
                await stage.aclose()
        if self._batches is not None:
            self._tail.clear()

    async def _chunk_jobs(self) -> AsyncIterator[tuple[ChunkJob, int]]:
        first = True
        while (job := self._planner.next_job()) is not None:
            yield job, job.count
            if first:
                # Size the rest from a measured cost: without it, slow records
                # would be sent in chunks of many seconds.
                first = False
                await self._first_measured.wait()

    async def _run_chunk(self, job: ChunkJob) -> Any:
        try:
            result, seconds = await self._run_stage(0, job)
            self._planner.observe(job.count, seconds)
            return result
        finally:
            self._first_measured.set()

    async def _run_batches(self, job: BatchJob) -> Outputs:
        result, _ = await self._run_stage(1, job)
        return result  # type: ignore[no-any-return]

    async def _run_stage(self, stage: int, payload: Any) -> tuple[Any, float]:
        seconds = 0.0
        for k, segment in enumerate(self._program.stages[stage]):
            if segment.on_loop:
                payload = await self._program.arun_segment(stage, k, payload)
            else:
                payload, spent = await self._executor.run(stage, k, payload)
                seconds += spent
        return payload, seconds

    async def _batch_jobs(self) -> AsyncIterator[tuple[BatchJob, int]]:
        while not self._tail.failed and (found := await self._records.next()) is not None:
            elements, weight = found
            assert isinstance(elements, Elements)
            # Elements leave the record window once the tail holds them; the
            # tail holds fewer than one batch, and batches have their own window.
            self._records.window.release(weight)
            for job in self._tail.push(elements):
                yield job, max(1, len(job.plan.groups))
        for job in self._tail.finish():
            yield job, len(job.plan.groups)

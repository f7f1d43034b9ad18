"""`worker_count=0`: the whole pipeline in the caller's thread, one unit at a time.

This is the debug mode: no worker thread, no event loop thread, the user's
code on the caller's stack, and a cost close to a plain loop. The sync path
is a generator; `async for` runs the concurrent pipeline with an executor
that runs each segment right away on the loop's thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from aioloader._planner import ChunkPlanner
from aioloader._positions import Position
from aioloader._program import Outputs, Plan, Program
from aioloader._tail import TailBatcher


class InlineExecutor:
    """Runs each segment at once in the calling thread (the loop's, for `async for`)."""

    def __init__(self, program: Program) -> None:
        self._program = program

    async def run(self, stage: int, segment: int, payload: Any) -> tuple[Any, float]:
        """Run one segment now, blocking the loop: the debug mode's trade."""
        started = time.perf_counter()
        return self._program.run_segment(stage, segment, payload), time.perf_counter() - started

    def close(self, timeout: float = 2.0) -> bool:
        """Nothing to stop: there are no threads."""
        return True

    async def aclose(self, timeout: float = 2.0) -> bool:
        """Nothing to stop: there are no threads."""
        return True


def inline_outputs(program: Program, position: Position, prefetch_buffer_size: int) -> Iterator[Outputs]:
    """The pipeline's outputs, computed one chunk at a time in this thread."""
    batch = program.operations.batch
    unit = batch.batch_size if program.plan is Plan.FUSED and batch is not None else 1
    planner = ChunkPlanner(position, program.sampler.length, unit, prefetch_buffer_size)
    tail = TailBatcher(batch, position[2]) if program.plan is Plan.TAIL and batch is not None else None
    runner: asyncio.Runner | None = None

    def run(stage: int, payload: Any) -> tuple[Any, float]:
        """Run one stage's segments; return the result and the seconds of synchronous work.

        Awaited segments (async reads and maps) are not counted: waiting on
        I/O is not work, and counting it would shrink the chunks, and with
        them the reads in flight, to one record.
        """
        nonlocal runner
        seconds = 0.0
        for k, segment in enumerate(program.stages[stage]):
            if segment.on_loop:
                runner = runner or asyncio.Runner()
                payload = runner.run(program.arun_segment(stage, k, payload))
            else:
                started = time.perf_counter()
                payload = program.run_segment(stage, k, payload)
                seconds += time.perf_counter() - started
        return payload, seconds

    try:
        while (job := planner.next_job()) is not None:
            result, seconds = run(0, job)
            planner.observe(job.count, seconds)
            units = [result] if tail is None else [run(1, batch_job)[0] for batch_job in tail.push(result)]
            # Hold no reference to what the consumer has while the next chunk
            # is made, so that one unit at a time is alive.
            del result
            while units:
                unit = units.pop(0)
                yield unit
                if unit.failure is not None:
                    return
                del unit
        for batch_job in tail.finish() if tail is not None else ():
            yield run(1, batch_job)[0]
    finally:
        if runner is not None:
            runner.close()

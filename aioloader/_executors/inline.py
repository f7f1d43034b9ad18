"""`worker_count=0`: the whole pipeline in the caller's thread, one `Outputs` at a time.

This is the debug mode: no worker thread, no event loop thread, the user's
code on the caller's stack, and a cost close to a plain loop. The pipeline is
written once, as a generator that yields either outputs or an `Await` request
for an asynchronous segment; `run_inline` answers those with a private event
loop for `for`, and `arun_inline` awaits them on the running loop for
`async for` (where the synchronous segments then run on the loop itself).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Coroutine, Generator
from dataclasses import dataclass
from typing import Any

from aioloader._common.positions import Position
from aioloader._program.jobs import Outputs
from aioloader._program.program import Plan, Program, Stage
from aioloader._scheduling.planner import ChunkPlanner
from aioloader._scheduling.tail import TailBatcher


@dataclass
class Await:
    """A request to await `coroutine` and send its result back."""

    coroutine: Coroutine[Any, Any, Any]


Steps = Generator[Any, Any, None]


def inline_steps(program: Program, position: Position, prefetch_buffer_size: int) -> Steps:
    """The pipeline's outputs one `Outputs` at a time, yielding `Await`s for async segments."""
    batch = program.operations.batch
    multiple = batch.batch_size if program.plan is Plan.FUSED and batch is not None else 1
    planner = ChunkPlanner(position, program.sampler.length, multiple, prefetch_buffer_size)
    tail = TailBatcher(batch, position[2]) if program.plan is Plan.TAIL and batch is not None else None
    while (job := planner.next_job()) is not None:
        result, seconds = yield from _run_stage(program, Stage.RECORDS, job)
        planner.observe(job.count, seconds)
        ready: list[Outputs] = []
        if tail is None:
            ready.append(result)
        else:
            for batch_job in tail.push(result):
                ready.append((yield from _run_stage(program, Stage.BATCHES, batch_job))[0])
        # Hold no reference to what the consumer has while the next chunk is
        # made, so that one `Outputs` at a time is alive.
        del result
        while ready:
            outputs: Outputs = ready.pop(0)
            yield outputs
            if outputs.failure is not None:
                return
            del outputs
    for batch_job in tail.finish() if tail is not None else ():
        yield (yield from _run_stage(program, Stage.BATCHES, batch_job))[0]


def _run_stage(program: Program, stage: Stage, payload: Any) -> Generator[Any, Any, tuple[Any, float]]:
    """Run one stage's segments; return the result and the CPU seconds of synchronous work.

    Awaited segments (async reads and maps) are not counted: waiting on I/O is
    not work, and counting it would shrink the chunks, and with them the reads
    in flight, to one record.
    """
    seconds = 0.0
    for k, segment in enumerate(program.segments[stage]):
        if segment.on_loop:
            payload = yield Await(program.arun_segment(stage, k, payload))
        else:
            started = time.thread_time()
            payload = program.run_segment(stage, k, payload)
            seconds += time.thread_time() - started
    return payload, seconds


def run_inline(steps: Steps) -> Generator[Outputs, None, None]:
    """The outputs of `steps`, awaiting its requests on a private event loop if it makes any."""
    runner: asyncio.Runner | None = None
    try:
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, Await):
                runner = runner or asyncio.Runner()
                answer = runner.run(step.coroutine)
            else:
                answer = None
                yield step
                del step
    finally:
        steps.close()
        if runner is not None:
            runner.close()


async def arun_inline(steps: Steps) -> AsyncGenerator[Outputs, None]:
    """The outputs of `steps`, awaiting its requests on the running loop."""
    try:
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, Await):
                answer = await step.coroutine
            else:
                answer = None
                yield step
                del step
    finally:
        steps.close()

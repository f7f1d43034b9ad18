"""One job on its way through its stage's segments: the walk that both drivers share.

A job's stage is a list of segments (see `Program`): runs of synchronous
steps for a worker, and asynchronous steps to await on an event loop.
`Work` knows where its next segment runs (`place`), runs one on a worker
(`run_segment`, timed in CPU seconds) and awaits one (`await_segment`). The
threaded driver (`Scheduler` with `WorkerThreads` and `AsyncSegments`) moves
a `Work` between threads at each change of place; the inline driver
(`inline_steps`) walks it in the caller's thread. Only the drivers differ.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Any

from aioloader._program.program import Program, Stage

SegmentRunner = Callable[[Stage, int, Any], Any]  # (stage, segment, payload) -> payload


class Place(enum.Enum):
    """Where a job's next segment runs."""

    WORKER = "worker"  # a synchronous segment: on a worker (or the caller, inline)
    LOOP = "loop"  # an asynchronous segment: awaited on an event loop
    DONE = "done"  # no segment left: `payload` is the stage's result


class Work:
    """Job number `seq` of `stage`, with `weight` in its window, at segment `segment`.

    `payload` is the job before the first segment and each segment's result
    after it; `seconds` is the CPU time its synchronous segments took, and
    `wall` their wall time, which size the next chunks (awaited segments are not counted: waiting on I/O
    is not work, and counting it would shrink the chunks, and with them the
    reads in flight, to one record).
    """

    __slots__ = ("payload", "seconds", "segment", "seq", "stage", "wall", "weight")

    def __init__(self, stage: Stage, seq: int, payload: Any, weight: int) -> None:
        self.stage, self.seq, self.payload, self.weight = stage, seq, payload, weight
        self.segment = 0
        self.seconds = self.wall = 0.0

    def place(self, program: Program) -> Place:
        """Where the next segment runs, or DONE."""
        segments = program.segments[self.stage]
        if self.segment == len(segments):
            return Place.DONE
        return Place.LOOP if segments[self.segment].on_loop else Place.WORKER

    def run_segment(self, run: SegmentRunner) -> None:
        """Run the next (synchronous) segment with `run`, in this thread, and count its CPU time.

        CPU time, not wall time: time spent waiting (for reads in the read
        pool, for the GIL) is not work.
        """
        started, wall = time.thread_time(), time.perf_counter()
        self.payload = run(self.stage, self.segment, self.payload)
        self.seconds += time.thread_time() - started
        self.wall += time.perf_counter() - wall
        self.segment += 1

    async def await_segment(self, program: Program) -> None:
        """Await the next (asynchronous) segment on the running loop."""
        self.payload = await program.arun_segment(self.stage, self.segment, self.payload)
        self.segment += 1

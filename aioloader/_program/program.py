"""The compiled pipeline: what to do with one unit of work, in steps.

A `Program` turns the user's source, sampler and operations into a plan made
of *segments*: runs of synchronous steps that a worker executes in one go,
separated by asynchronous steps (async sources, `async def` maps) that are
awaited on the event loop. How segments are scheduled is the pipeline's
business; the program only says what they compute.

There are three plans, chosen from the operations:

* no `Batch`: a chunk of records becomes its outputs;
* `Batch` after one-to-one operations only ("fused"): batch boundaries are
  known in advance, so a chunk holds whole batches and the workers batch too;
* `Batch` after a filter or flat-map ("tail"): how many elements a record
  gives is data, so stage 1 makes elements, the ordered tail on the loop cuts
  batches, and stage 2 (on the workers again) stacks them and runs the
  operations after `Batch`.

Steps are named, not closures, so that another interpreter can run them on
its own copy of the program.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aioloader._common.failures import Failure
from aioloader._common.positions import (
    EvenPositions,
    Position,
    positions_after_elements,
    positions_before_elements,
)
from aioloader._operations.apply import Run, apply, apply_async
from aioloader._operations.batching import BatchPlan, BatchRun
from aioloader._operations.transforms import Kind, Op, Operations
from aioloader._program.read_pool import ReadPool
from aioloader._program.records import RecordChunk, aread, read
from aioloader._sampling.walk import Walk
from aioloader._sources.protocols import is_async_source


class Plan(enum.Enum):
    """How batches are formed (see the module docstring)."""

    RECORDS = "records"
    FUSED = "fused"
    TAIL = "tail"


@dataclass(slots=True)
class ChunkJob:
    """Stage-1 work: `count` walk positions from `start`.

    `skip` and `skip_outputs` are non-zero only for the first job after a
    resume inside a record's or a batch's outputs.
    """

    start: int
    count: int
    skip: int = 0
    skip_outputs: int = 0


@dataclass(slots=True)
class BatchJob:
    """Stage-2 work (tail plan): batches cut by the ordered tail."""

    plan: BatchPlan
    skip_outputs: int = 0
    failure: Failure | None = None


@dataclass(slots=True)
class Elements:
    """Stage-1 result of the tail plan: elements with their positions."""

    items: list[Any]
    before: list[Position]
    after: list[Position]
    indices: list[int]  # the global index of each element's record
    rngs: list[np.random.Generator | None]
    failure: Failure | None


@dataclass(slots=True)
class Outputs:
    """Consecutive outputs for the consumer; `after[j]` is the position just past `items[j]`.

    `failure`, if any, is raised once every item has been delivered.
    """

    items: list[Any]
    after: Sequence[Position]
    failure: Failure | None


Step = tuple[str, int]


@dataclass(frozen=True)
class Segment:
    """Steps run together: on a worker (`on_loop=False`) or awaited on the loop."""

    steps: tuple[Step, ...]
    on_loop: bool


class Program:
    """The source, the sampler's walk and the operations, and the segments of each stage."""

    def __init__(self, source: Any, sampler: Walk, operations: Operations, read_threads: int) -> None:
        self.source, self.sampler, self.operations = source, sampler, operations
        self.seed = sampler.seed
        self.read_threads = read_threads
        self.plan = _choose_plan(operations)
        self.stages = _segments(self.plan, operations, is_async_source(source))
        self._limit: asyncio.Semaphore | None = None
        self.read_pool: ReadPool | None = None  # set by engines with worker threads

    def for_worker(self) -> Program:
        """A copy for one worker: its own operations, the same source and walk.

        The operations are deep-copied so that each thread owns the state its
        transforms hold; the source and the walk are shared (both are
        thread-safe, and a source may be large).
        """
        clone = copy.copy(self)
        clone.operations = self.operations.for_worker()
        return clone

    def run_segment(self, stage: int, segment: int, payload: Any) -> Any:
        """Run one synchronous segment on `payload` (called on a worker)."""
        return self.run_steps(self.stages[stage][segment].steps, payload)

    def run_steps(self, steps: Sequence[Step], payload: Any) -> Any:
        """Run synchronous `steps` in order on `payload`: a segment, or the part of
        one that an executor keeps in this interpreter."""
        for name, arg in steps:
            payload = getattr(self, f"_step_{name}")(arg, payload)
        return payload

    async def arun_segment(self, stage: int, segment: int, payload: Any) -> Any:
        """Await one asynchronous segment on `payload` (called on the loop)."""
        for name, arg in self.stages[stage][segment].steps:
            payload = await getattr(self, f"_astep_{name}")(arg, payload)
        return payload

    # Synchronous steps: (arg, payload) -> payload.

    def _step_keys(self, _: int, job: ChunkJob) -> RecordChunk:
        walked = self.sampler.walk(job.start, job.start + job.count)
        chunk = RecordChunk(job.start, walked.keys, walked.indices, job.skip, job.skip_outputs)
        chunk.rngs = walked.rngs
        if walked.error is not None:  # a foreign sampler failed: its records so far come first
            index = walked.indices[len(walked.keys)]
            chunk.failure = Failure.at_record(walked.error, f"sampler[{index}]", index, None)
        return chunk

    def _step_read(self, _: int, chunk: RecordChunk) -> RecordChunk:
        pool = self.read_pool  # see `_read_pool`
        if pool is None or hasattr(self.source, "__getitems__"):
            read(self.source, chunk)
        elif pool.engaged:
            read(self.source, chunk, pool.map)
        elif pool.suspicious:
            read(self.source, chunk, pool.probing_map)
        else:
            started = time.perf_counter()
            read(self.source, chunk)
            pool.note_chunk(time.perf_counter() - started, len(chunk.keys))
        return chunk

    def _step_before(self, i: int, run: Run) -> Run:
        apply(self.operations.before[i], run, self.seed)
        return run

    def _step_after(self, i: int, run: Run) -> Run:
        apply(self.operations.after[i], run, self.seed)
        return run

    def _step_records_out(self, _: int, chunk: RecordChunk) -> Outputs:
        chunk.drop_skipped()
        stop = chunk.start + len(chunk.keys)
        if chunk.origins is None:
            return Outputs(chunk.items, EvenPositions(chunk.start, 1, len(chunk.items), stop), chunk.failure)
        return Outputs(
            chunk.items, positions_after_elements(chunk.start, chunk.origins, chunk.skip), chunk.failure
        )

    def _step_elements_out(self, _: int, chunk: RecordChunk) -> Elements:
        chunk.drop_skipped()
        origins = chunk.origin_list()
        rngs = [None if chunk.rngs is None else chunk.rngs[o] for o in origins]
        return Elements(
            chunk.items,
            positions_before_elements(chunk.start, origins, chunk.skip),
            positions_after_elements(chunk.start, origins, chunk.skip),
            [chunk.indices[o] for o in origins],
            rngs,
            chunk.failure,
        )

    def _step_fuse(self, _: int, chunk: RecordChunk) -> BatchRun:
        batch = self.operations.batch
        assert batch is not None
        size, items, start = batch.batch_size, chunk.items, chunk.start
        complete = len(items) if chunk.failure is None else len(items) // size * size
        if batch.drop_remainder:
            complete = len(items) // size * size
        bounds = [(b, min(b + size, complete)) for b in range(0, complete, size)]
        rngs = chunk.rngs
        plan = BatchPlan(
            groups=[items[b:e] for b, e in bounds],
            before=[(start + b, 0, chunk.skip_outputs if b == 0 else 0) for b, _ in bounds],
            after=[(start + e, 0, 0) for _, e in bounds],
            first=[chunk.indices[b] for b, _ in bounds],
            last=[chunk.indices[e - 1] for _, e in bounds],
            last_rng=[None if rngs is None else rngs[e - 1] for _, e in bounds],
        )
        return BatchRun(plan, batch, chunk.skip_outputs, chunk.failure)

    def _step_batch(self, _: int, job: BatchJob) -> BatchRun:
        assert self.operations.batch is not None
        return BatchRun(job.plan, self.operations.batch, job.skip_outputs, job.failure)

    def _step_batches_out(self, _: int, run: BatchRun) -> Outputs:
        run.drop_first_outputs()
        return Outputs(run.items, run.positions_after(), run.failure)

    # Asynchronous steps, awaited on the loop.

    def _read_limit(self) -> asyncio.Semaphore:
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.read_threads)
        return self._limit

    async def _astep_aread(self, _: int, chunk: RecordChunk) -> RecordChunk:
        await aread(self.source, chunk, self._read_limit())
        return chunk

    async def _astep_abefore(self, i: int, run: Run) -> Run:
        await apply_async(self.operations.before[i], run, self._read_limit())
        return run

    async def _astep_aafter(self, i: int, run: Run) -> Run:
        await apply_async(self.operations.after[i], run, self._read_limit())
        return run


def _choose_plan(operations: Operations) -> Plan:
    if operations.batch is None:
        return Plan.RECORDS
    return Plan.FUSED if all(op.one_to_one for op in operations.before) else Plan.TAIL


def _op_steps(ops: list[Op], name: str) -> list[tuple[Step, bool]]:
    return [
        ((("a" + name) if op.kind is Kind.ASYNC_MAP else name, i), op.kind is Kind.ASYNC_MAP)
        for i, op in enumerate(ops)
    ]


def _segments(plan: Plan, operations: Operations, async_source: bool) -> list[list[Segment]]:
    """Group each stage's steps into segments (see `Segment`)."""
    first: list[tuple[Step, bool]] = [
        (("keys", 0), False),
        (("aread", 0), True) if async_source else (("read", 0), False),
    ]
    first += _op_steps(operations.before, "before")
    if plan is Plan.RECORDS:
        return [_group([*first, (("records_out", 0), False)])]
    after = _op_steps(operations.after, "after")
    if plan is Plan.FUSED:
        return [_group([*first, (("fuse", 0), False), *after, (("batches_out", 0), False)])]
    second = [(("batch", 0), False), *after, (("batches_out", 0), False)]
    return [_group([*first, (("elements_out", 0), False)]), _group(second)]


def _group(steps: list[tuple[Step, bool]]) -> list[Segment]:
    segments: list[Segment] = []
    for step, on_loop in steps:
        if segments and segments[-1].on_loop == on_loop and not on_loop:
            segments[-1] = Segment((*segments[-1].steps, step), on_loop)
        else:
            segments.append(Segment((step,), on_loop))
    return segments

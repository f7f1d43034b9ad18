"""The compiled pipeline: what a worker does with one chunk of records (or one batch job), in steps.

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
  gives is data, so the `RECORDS` stage makes elements, the ordered tail
  (`TailBatcher`, in whichever thread delivers them in order) cuts batches,
  and the `BATCHES` stage (on the workers again) stacks them and runs the
  operations after `Batch`.

Steps are named (`Step`), not closures, so that another interpreter can run
them on its own copy of the program; the tables at the end of this module
say which method runs each.
"""

from __future__ import annotations

import copy
import enum
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from aioloader._common.calls import Shutdown, stray_stop
from aioloader._common.failures import Failure
from aioloader._common.positions import (
    EvenPositions,
    positions_after_elements,
    positions_before_elements,
)
from aioloader._observability import meter as meter
from aioloader._observability.filtering import FilterWindows
from aioloader._observability.meter import Meter, Meters
from aioloader._operations.apply import Run, apply, apply_async
from aioloader._operations.batching import BatchPlan, BatchRun
from aioloader._operations.fused import PROBE_RECORDS, FusedMaps
from aioloader._operations.transforms import Kind, Op, Operations
from aioloader._program.jobs import BatchJob, ChunkJob, Elements, Outputs
from aioloader._program.records import RecordChunk, aread, read, read_label
from aioloader._program.steps import Step, StepCall
from aioloader._sampling.walk import Walk
from aioloader._sources.protocols import is_async_source

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio

    from aioloader._program.early import EarlyRead, ReadAhead  # loaded where they are made
    from aioloader._program.read_pool import ReadPool  # loaded with the first workers


class Plan(enum.Enum):
    """How batches are formed (see the module docstring)."""

    RECORDS = "records"
    FUSED = "fused"
    TAIL = "tail"


class Stage(enum.Enum):
    """The stages of work: every plan has `RECORDS`; only the tail plan has `BATCHES`.

    `RECORDS` takes a `ChunkJob` (sampler indices) to its outputs, or to
    `Elements` for the tail; `BATCHES` takes a `BatchJob` cut by the tail to
    its outputs. The fused plan also has the tail plan's two stages, as
    `PARTS` and `JOIN`, for its first batch made in parts on several threads
    (see `_scheduling/first_batch`).
    """

    RECORDS = "records"
    BATCHES = "batches"
    PARTS = "parts"
    JOIN = "join"

    __hash__ = object.__hash__  # as `Step`'s: a dict key on every segment of every chunk


class Segment(NamedTuple):
    """Steps run together: on a worker (`on_loop=False`) or awaited on the loop."""

    steps: tuple[StepCall, ...]
    on_loop: bool


class Program:
    """The source, the sampler's walk, the operations, and each stage's segments (`segments[stage]`).

    `read_threads` bounds the reads and `async def` maps awaited at once
    (0, Grain's "no read threads", awaits them one at a time);
    `read_pool`, given with worker threads, reads slow sources concurrently
    (see `read_pool`); without it, every read is the worker's own.
    `fuse` runs the read and the maps after it record by record, in one
    step (`Step.READ_MAPS`, see `_operations/fused`); the subinterpreter
    executor, which runs reads and maps in other interpreters step by step,
    asks for programs that do not.
    `workers`: the engine may start worker threads, and calls
    `prepare_workers` before anything runs the operations.
    `shutdown` is set when the engine closes (each worker's copy reads a flag
    of its own, set with it): a synchronous segment then stops before its next read or call of user
    code, raising `Stopped` (see `_common/calls`).
    """

    def __init__(
        self,
        source: Any,
        sampler: Walk,
        operations: Operations,
        read_threads: int,
        read_pool: ReadPool | None = None,
        fuse: bool = True,
        workers: bool = False,
    ) -> None:
        self.source, self.sampler = source, sampler
        self.operations, self._claimed = operations.claim()  # see `release`
        self._pattern: Operations | None = None  # what each worker copies (see `prepare_workers`)
        if self._claimed and not workers:
            self.operations.settle(None)
        self.seed = sampler.seed
        self.read_threads = read_threads
        self.read_pool = read_pool
        self.plan = _choose_plan(operations)
        self.segments = _segments(self.plan, operations, is_async_source(source), fuse)
        self._split: list[tuple[StepCall, int, float]] = []  # see `_count`
        self._maps: FusedMaps | None = None  # see `_fused_maps`
        self._batched_reads = hasattr(source, "__getitems__")
        # A source whose `__getitems__` only loops over the keys (a MapDataset of a source
        # without one) still has its slow reads go to the read pool, one key at a time.
        self._pooled_reads = not self._batched_reads or getattr(source, "loops_over_keys", False)
        self._limit: asyncio.Semaphore | None = None
        # Counters: this copy's (the inline driver's, or the loop's for awaited
        # steps), and each worker copy's own (see `for_worker`).
        self.meters = Meters()
        self.meter: Meter | None = self.meters.new("pipeline") if meter.ENABLED else None
        self.shutdown = Shutdown()
        self.filters = FilterWindows()  # this copy's: each worker's is its own
        self.early: EarlyRead | None = None  # see `read_early`
        self.ahead: ReadAhead | None = None  # see `read_ahead`

    def read_early(self, job: ChunkJob, threads: int) -> EarlyRead | None:
        """Start reading `job`'s records on other threads, for the first `_step_read` of
        that chunk to take (`start_prefetch()` with `worker_count=0`); None for an
        async source, whose reads are awaited where they are needed."""
        if is_async_source(self.source):
            return None
        from aioloader._program.early import EarlyRead

        self.early = EarlyRead(self.source, self._step_keys(0, job), threads, self.shutdown)
        return self.early

    def read_ahead(self, job: ChunkJob) -> None:
        """Queue `job`'s reads on the read pool now, for its chunk to take: the inline
        driver's next chunk, read while the consumer takes the outputs of the one before,
        as Grain's read threads read ahead. Only once the pool is engaged (reads were seen
        waiting), and not while an early read waits to be taken."""
        pool = self.engaged_pool()
        if pool is None or not self._pooled_reads or self.early is not None:
            return
        from aioloader._program.early import ReadAhead

        self.ahead = ReadAhead(self.source, job, self._step_keys(0, job), pool, self.shutdown)

    def release(self) -> None:
        """The engine is done with this program: another may run the loader's own
        operations (see `Operations.claim`). Idempotent."""
        if self._claimed:
            self._claimed = False
            self.operations.release()

    def awaits(self) -> bool:
        """True when some segment must be awaited on an event loop."""
        return any(segment.on_loop for stage in self.segments.values() for segment in stage)

    def prepare_workers(self, shared: bool, required: bool) -> None:
        """Before anything runs the operations: where the workers are not alone in running
        them (`shared`: the consumer's thread runs chunks, or the event loop awaits `async
        def` maps), make the pattern that each worker copies, which nothing runs (a worker
        copying the operations while another thread runs them fails, or catches a
        transform's state half-changed: "dictionary changed size during iteration"). The
        workers then hold the operations as they were when the iteration started. A copy
        that fails raises if `required`, else leaves no pattern (`copyable` is False). Where
        only workers run the operations, they copy them directly (nothing is copied here:
        on the event loop, for `async for`)."""
        if shared:
            try:
                self._pattern = self.operations.for_worker()
            except Exception:  # the copy's own error, naming the operation
                if required:
                    raise
        if self._claimed:
            self.operations.settle(self._pattern)

    def copyable(self) -> bool:
        """Whether the workers can copy the operations (their pattern was made)."""
        return self._pattern is not None

    def for_worker(self) -> Program:
        """A copy for one worker: its own operations, the same source and walk.

        The operations are deep-copied (from the pattern, see `prepare_workers`,
        if there is one) so that each thread owns the state its transforms hold,
        and the shutdown flag is the thread's own (see
        `Shutdown`); the source and the walk are shared (both are thread-safe,
        and a source may be large). Called in the worker's thread.
        """
        clone = copy.copy(self)
        clone.operations = (self.operations if self._pattern is None else self._pattern).for_worker()
        clone._pattern, clone._claimed = None, False  # the copy's operations are its own
        clone.shutdown = self.shutdown.for_thread()
        clone._maps = None  # compiled from the clone's own operations when it first runs them
        clone.filters = FilterWindows()
        clone.meter = self.meters.new("steps") if meter.ENABLED else None
        return clone

    def run_segment(self, stage: Stage, segment: int, payload: Any) -> Any:
        """Run one synchronous segment on `payload` (called on a worker)."""
        return self.run_steps(self.segments[stage][segment].steps, payload)

    def run_steps(self, steps: Sequence[StepCall], payload: Any) -> Any:
        """Run synchronous `steps` in order on `payload`: a segment, or the part of
        one that an executor keeps in this interpreter.

        Each step's items out and wall time go to this copy's meter: one
        thread's own counters, a few attribute updates per step of a chunk."""
        counter = self.meter
        if counter is None:
            for step, arg in steps:
                payload = _SYNC_STEPS[step](self, arg, payload)
            return payload
        started = time.perf_counter()
        for call in steps:
            step = call[0]
            payload = _SYNC_STEPS[step](self, call[1], payload)
            ended = time.perf_counter()  # one clock read per step: this step's end, the next one's start
            if step is Step.READ_MAPS:  # counted as the steps it stands for (see `_split`)
                for key, items, share in self._split:
                    counter.count(key, items, (ended - started) * share)
            else:
                counter.count(
                    call, len(payload.keys) if step is Step.KEYS else len(payload.items), ended - started
                )
            started = ended
        return payload

    async def arun_segment(self, stage: Stage, segment: int, payload: Any) -> Any:
        """Await one asynchronous segment on `payload` (called on the loop; wall time counted)."""
        counter = self.meter
        for call in self.segments[stage][segment].steps:
            started = time.perf_counter()
            payload = await _ASYNC_STEPS[call[0]](self, call[1], payload)
            if counter is not None:
                counter.count(
                    call,
                    len(payload.keys) if call[0] is Step.KEYS else len(payload.items),
                    time.perf_counter() - started,
                )
        return payload

    def stage_names(self) -> list[tuple[StepCall, str]]:
        """The steps that statistics show, in pipeline order, each with its stage's name:
        `sampling`, `read`, each operation by its label, `batch`."""
        named: dict[StepCall, str] = {}  # a step of two stages (the fused plan's first batch) once
        for stage in self.segments.values():
            for segment in stage:
                calls = [key for call in segment.steps for key in _counted_as(call)]
                named |= {call: self._stage_name(call) for call in calls if call[0] not in _OUTS}
        return list(named.items())

    def engaged_pool(self) -> ReadPool | None:
        """The read pool once it is engaged (reads were seen waiting, see `read_pool`), else None."""
        pool = self.read_pool
        return pool if pool is not None and pool.engaged else None

    def reads_at_once(self) -> int:
        """How many of a chunk's reads wait together: the read pool's threads once it is
        engaged, else one (see `ChunkPlanner.observe`)."""
        pool = self.engaged_pool()
        return 1 if pool is None else pool.threads

    def _stage_name(self, call: StepCall) -> str:
        step, i = call
        if step in (Step.BEFORE, Step.ABEFORE):
            return self.operations.before[i].label
        if step in (Step.AFTER, Step.AAFTER):
            return self.operations.after[i].label
        return _STAGE_NAMES[step]

    # Synchronous steps: (arg, payload) -> payload (see `_SYNC_STEPS`).

    def _step_keys(self, _: int, job: ChunkJob) -> RecordChunk:
        ahead = self.ahead
        if ahead is not None and ahead.job is job:  # walked already, its reads queued
            return ahead.chunk
        walked = self.sampler.walk(job.start, job.start + job.count)
        chunk = RecordChunk(job.start, walked.keys, walked.indices, job.skip, job.skip_outputs)
        chunk.rngs = walked.rngs
        if walked.error is not None:  # a foreign sampler failed: its records so far come first
            index = walked.indices[len(walked.keys)]
            chunk.failure = Failure.at_record(walked.error, f"sampler[{index}]", index, None)
        return chunk

    def _step_read(self, _: int, chunk: RecordChunk) -> RecordChunk:
        early, self.early = self.early, None
        if early is not None and early.take(chunk):
            return chunk
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead.take(chunk):
            return chunk
        pool = self.read_pool  # see `_read_pool`
        if pool is None or not self._pooled_reads:
            read(self.source, chunk, self.shutdown)
        elif pool.engaged:
            read(self.source, chunk, self.shutdown, pool.map)
        elif pool.suspicious:
            read(self.source, chunk, self.shutdown, pool.probing_map)
        else:
            started = pool.clock()
            read(self.source, chunk, self.shutdown)
            pool.note_chunk(pool.clock() - started, len(chunk.keys))
        return chunk

    def _step_read_maps(self, count: int, chunk: RecordChunk) -> RecordChunk:
        """READ, then the maps `before[:count]`, record by record (see `_operations/fused`).

        A read that is not one `source[key]` per record in this thread (a
        source with `__getitems__`, the read pool, an early read) is done
        first, as READ does; the maps still run record by record."""
        started = time.perf_counter()
        maps = self._fused_maps(count)
        pool = self.read_pool
        reads = self.early is None and not self._batched_reads and (pool is None or pool.idle)
        read: tuple[int, float] | None = None
        if not reads:
            self._step_read(0, chunk)
            read = len(chunk.items), time.perf_counter() - started
        inputs = chunk.keys if reads else chunk.items
        out: list[Any] = []
        chunk.items = out
        rngs = [_rng_maker(op, chunk, self.seed) for op in maps.ops] if maps.random else maps.no_rngs
        clock = time.perf_counter if pool is None else pool.clock
        get = self.source.__getitem__ if reads else None
        stage, error, spent = maps.run(out, inputs, get, rngs, self.shutdown, clock)
        if error is not None:
            what = read_label(self.source) if reads and stage == 0 else maps.ops[stage - reads].label
            chunk.fail(len(out), stray_stop(error, what), what)
        if reads and pool is not None:
            pool.note_chunk(spent[0] / min(len(inputs), PROBE_RECORDS) * len(inputs), len(inputs))
        failed = -1 if error is None else stage + (not reads)  # as an index into READ and the maps
        self._split = _split(count, len(out), failed, spent, read, time.perf_counter() - started)
        return chunk

    def _fused_maps(self, count: int) -> FusedMaps:
        """This copy's `before[:count]`, compiled once (each worker's copy has its own)."""
        maps = self._maps
        if maps is None:
            maps = self._maps = FusedMaps(self.operations.before[:count])
        return maps

    def _step_before(self, i: int, run: Run) -> Run:
        apply(self.operations.before[i], run, self.seed, self.shutdown, self.filters)
        return run

    def _step_after(self, i: int, run: Run) -> Run:
        apply(self.operations.after[i], run, self.seed, self.shutdown, self.filters)
        return run

    def _step_records_out(self, _: int, chunk: RecordChunk) -> Outputs:
        chunk.drop_leading(chunk.skip)
        stop = chunk.start + len(chunk.keys)
        if chunk.origins is None:
            return Outputs(chunk.items, EvenPositions(chunk.start, 1, len(chunk.items), stop), chunk.failure)
        return Outputs(
            chunk.items, positions_after_elements(chunk.start, chunk.origins, chunk.skip), chunk.failure
        )

    def _step_elements_out(self, _: int, chunk: RecordChunk) -> Elements:
        chunk.drop_leading(chunk.skip)
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
        size, items = batch.batch_size, chunk.items
        # A short batch only at the sampler's end: not before a failure, nor with drop_remainder.
        complete = len(items) if chunk.failure is None else len(items) // size * size
        if batch.drop_remainder:
            complete = len(items) // size * size
        plan = BatchPlan.of_records(
            items, complete, size, chunk.start, chunk.indices, chunk.rngs, chunk.skip_outputs
        )
        return BatchRun(plan, batch, chunk.skip_outputs, chunk.failure)

    def _step_batch(self, _: int, job: BatchJob) -> BatchRun:
        assert self.operations.batch is not None
        return BatchRun(job.plan, self.operations.batch, job.skip_outputs, job.failure)

    def _step_batches_out(self, _: int, run: BatchRun) -> Outputs:
        run.drop_leading(run.skip_outputs)
        return Outputs(run.items, run.positions_after(), run.failure)

    # Asynchronous steps, awaited on the loop (see `_ASYNC_STEPS`).

    def _read_limit(self) -> asyncio.Semaphore:
        if self._limit is None:
            import asyncio

            self._limit = asyncio.Semaphore(max(1, self.read_threads))
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


_OUTS = frozenset({Step.RECORDS_OUT, Step.ELEMENTS_OUT, Step.BATCHES_OUT})
_STAGE_NAMES = {
    Step.KEYS: "sampling",
    Step.READ: "read",
    Step.AREAD: "read",
    Step.FUSE: "batch",
    Step.BATCH: "batch",
}


def _counted_as(call: StepCall) -> list[StepCall]:
    """The steps whose statistics `call` counts: a fused read and maps count as each of them."""
    if call[0] is not Step.READ_MAPS:
        return [call]
    return [(Step.READ, 0), *((Step.BEFORE, i) for i in range(call[1]))]


def _rng_maker(op: Op, chunk: RecordChunk, seed: int | None) -> Callable[[int], Any] | None:
    """For a random map, element `j`'s generator (`j` is its record's offset in `chunk`)."""
    if op.kind is not Kind.RANDOM_MAP:
        return None
    make = op.rng
    if make is None:
        return lambda j: chunk.rng_of(j, seed)
    return lambda j: make(chunk.record_index(j))


def _split(
    maps: int, done: int, failed: int, spent: list[float], read: tuple[int, float] | None, seconds: float
) -> list[tuple[StepCall, int, float]]:
    """What `READ_MAPS` counts for each step it stands for: its items, and its share of the time.

    `done` elements came out of the loop; step `failed` (an index into the
    read and the maps; -1: none) raised on the next record, which the steps
    before it did give. `read`, for a read done before the loop: its records
    and seconds, of `seconds` in all. The loop's time is shared among its
    steps as the probe's `spent` was."""
    keys: list[StepCall] = [(Step.READ, 0), *((Step.BEFORE, i) for i in range(maps))]
    items = [done + (0 <= k < failed) for k in range(len(keys))]
    looped = spent if read is None else [0.0, *spent]
    read_share = 0.0 if read is None else min(read[1] / max(seconds, 1e-12), 1.0)
    probed = sum(looped) or 1.0  # nothing probed (an empty chunk): no time to share
    shares = [t / probed * (1.0 - read_share) for t in looped]
    if read is not None:
        items[0], shares[0] = read[0], read_share
    return list(zip(keys, items, shares, strict=True))


def _choose_plan(operations: Operations) -> Plan:
    if operations.batch is None:
        return Plan.RECORDS
    return Plan.FUSED if all(op.one_to_one for op in operations.before) else Plan.TAIL


def _op_steps(ops: list[Op], step: Step, awaited: Step, first: int = 0) -> list[StepCall]:
    return [(awaited if op.kind is Kind.ASYNC_MAP else step, i) for i, op in enumerate(ops) if i >= first]


def _leading_maps(ops: list[Op]) -> int:
    """How many of `ops`, from the first, are synchronous maps (fused with the read)."""
    count = 0
    while count < len(ops) and ops[count].kind in (Kind.MAP, Kind.RANDOM_MAP):
        count += 1
    return count


def _segments(
    plan: Plan, operations: Operations, async_source: bool, fuse: bool
) -> dict[Stage, list[Segment]]:
    """Group each stage's steps into segments (see `Segment`)."""
    maps = 0 if async_source or not fuse else _leading_maps(operations.before)
    read = (Step.AREAD, 0) if async_source else (Step.READ_MAPS, maps) if maps else (Step.READ, 0)
    first: list[StepCall] = [(Step.KEYS, 0), read]
    first += _op_steps(operations.before, Step.BEFORE, Step.ABEFORE, maps)
    if plan is Plan.RECORDS:
        return {Stage.RECORDS: _group([*first, (Step.RECORDS_OUT, 0)])}
    after = _op_steps(operations.after, Step.AFTER, Step.AAFTER)
    second = [(Step.BATCH, 0), *after, (Step.BATCHES_OUT, 0)]
    if plan is Plan.FUSED:
        return {
            Stage.RECORDS: _group([*first, (Step.FUSE, 0), *after, (Step.BATCHES_OUT, 0)]),
            Stage.PARTS: _group([*first, (Step.ELEMENTS_OUT, 0)]),
            Stage.JOIN: _group(second),
        }
    return {Stage.RECORDS: _group([*first, (Step.ELEMENTS_OUT, 0)]), Stage.BATCHES: _group(second)}


def _group(calls: list[StepCall]) -> list[Segment]:
    """Consecutive synchronous steps make one segment; each awaited step is a segment of its own."""
    segments: list[Segment] = []
    for call in calls:
        on_loop = call[0].on_loop
        if segments and not on_loop and not segments[-1].on_loop:
            segments[-1] = Segment((*segments[-1].steps, call), on_loop)
        else:
            segments.append(Segment((call,), on_loop))
    return segments


# Which method runs each step: every step has exactly one, in one of the two tables.
_SYNC_STEPS: dict[Step, Callable[[Program, int, Any], Any]] = {
    Step.KEYS: Program._step_keys,
    Step.READ: Program._step_read,
    Step.READ_MAPS: Program._step_read_maps,
    Step.BEFORE: Program._step_before,
    Step.AFTER: Program._step_after,
    Step.RECORDS_OUT: Program._step_records_out,
    Step.ELEMENTS_OUT: Program._step_elements_out,
    Step.FUSE: Program._step_fuse,
    Step.BATCH: Program._step_batch,
    Step.BATCHES_OUT: Program._step_batches_out,
}
_ASYNC_STEPS: dict[Step, Callable[[Program, int, Any], Awaitable[Any]]] = {
    Step.AREAD: Program._astep_aread,
    Step.ABEFORE: Program._astep_abefore,
    Step.AAFTER: Program._astep_aafter,
}

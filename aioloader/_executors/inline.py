"""`worker_count=0`: the whole pipeline in the caller's thread, one `Outputs` at a time.

This is the debug mode: no worker thread, no event loop thread, the user's
code on the caller's stack, and a cost close to a plain loop. The pipeline is
written once, as a generator that yields either outputs or an `Await` request
for an asynchronous segment; `run_inline` answers those with a private event
loop for `for`, and `AsyncInline` awaits them on the running loop for
`async for` (where the synchronous segments then run on the loop itself).

What this driver decides without I/O is the threaded scheduler's code:
`plan_chunks` (chunk sizes and the tail), `Work` (the walk over a stage's
segments), `BatchPlan.cut` and `Run.drop_leading` (in the program's steps).
Only the driving is its own. It is kept apart from `Scheduler` on purpose:
one job at a time needs no window, no reorder buffer, no lock and no thread
hand-off, and paying for them would cost the debug mode its plain-loop speed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, NamedTuple

from aioloader._common.calls import Interrupt, Stopped
from aioloader._common.positions import Position
from aioloader._program.jobs import Outputs
from aioloader._program.program import Program, Stage
from aioloader._scheduling.planner import FIRST_CHUNK_RECORDS, output_bytes, plan_chunks
from aioloader._scheduling.work import Place, Work

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio


class Await(NamedTuple):
    """A request to await `coroutine` and send its result back."""

    coroutine: Coroutine[Any, Any, Any]


Steps = Generator[Any, Any, None]


def inline_steps(
    program: Program, position: Position, prefetch_buffer_size: int, first_records: int = FIRST_CHUNK_RECORDS
) -> Steps:
    """The pipeline's outputs one `Outputs` at a time, yielding `Await`s for async segments.

    `first_records`: the first chunk's size (see `ChunkPlanner`)."""
    planner, tail = plan_chunks(program, position, prefetch_buffer_size, first_records)
    job = planner.next_job()
    while job is not None:
        result, seconds, wall = yield from _run_stage(program, Stage.RECORDS, job)
        planner.observe(job.count, seconds, wall, output_bytes(result), program.reads_at_once())
        count, job = job.count, planner.next_job()
        if job is not None and result.failure is None and program.engaged_pool() is not None:
            # Reads wait: read the next chunk while the consumer takes this one's outputs,
            # within the bound (this chunk's records and the next's, `prefetch_buffer_size`
            # at most: later chunks are cut to half of it).
            planner.limit(prefetch_buffer_size // 2)
            if count + job.count <= prefetch_buffer_size:
                program.read_ahead(job)
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


def _run_stage(program: Program, stage: Stage, job: Any) -> Generator[Any, Any, tuple[Any, float, float]]:
    """Walk `job` through the stage's segments; return the result, and the CPU and wall
    seconds of its synchronous segments (see `Work`)."""
    work = Work(stage, 0, job, 0)
    del job  # the work holds it, and lets it go once a segment has made its result
    while (place := work.place(program)) is not Place.DONE:
        if place is Place.LOOP:
            yield Await(work.await_segment(program))
        else:
            work.run_segment(program.run_segment)
    return work.payload, work.seconds, work.wall


def run_inline(steps: Steps, awaits: InlineAwaits | None = None) -> Generator[Outputs, None, None]:
    """The outputs of `steps`, awaiting its requests on `awaits`' private event loop."""
    awaits = awaits or InlineAwaits()
    try:
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, Await):
                answer = awaits.run(step.coroutine)
            else:
                answer = None
                yield step
                del step
    finally:
        steps.close()
        awaits.close()


class InlineAwaits:
    """The private event loop on which `for` at `worker_count=0` awaits the async segments,
    made with the first of them; `cancel()`, from any thread (a `close()` while `next()`
    awaits), ends the await in progress with `Stopped`."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """`coroutine`'s result, awaited here; an `Interrupt` is raised as what it carries."""
        import asyncio

        self._runner = self._runner or asyncio.Runner()
        try:
            return self._runner.run(self._tracked(coroutine))
        except Interrupt as carried:
            raise carried.error from None
        except asyncio.CancelledError:
            if self._cancelled:
                raise Stopped from None
            raise

    async def _tracked(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        import asyncio

        self._task = asyncio.current_task()
        try:
            if self._cancelled:  # cancelled before this await began
                coroutine.close()
                raise Stopped
            return await coroutine
        finally:
            self._task = None

    def cancel(self) -> None:
        """Cancel the await in progress, if any, and every later one (any thread)."""
        self._cancelled = True
        task, runner = self._task, self._runner
        if task is not None and runner is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing awaits
                runner.get_loop().call_soon_threadsafe(task.cancel)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


class AsyncInline:
    """The outputs of `steps` on the running loop, one `Outputs` per `anext()`.

    The synchronous segments run on the loop itself (the debug mode); each
    asynchronous one is awaited as a task, so that `close()` (from the same
    loop, while an `anext()` awaits) can cancel it: that `anext()` then
    answers the end. An `anext()` whose own task is cancelled (a timeout
    around it) leaves that task running, and the next `anext()` takes it up
    where it was: nothing is lost or done twice. `steps` waits at a `yield`
    whenever anything else runs, so closing it never meets it running.
    """

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._awaited: asyncio.Future[Any] | None = None  # in flight, or left by a cancelled `anext()`
        self._closed = False

    async def anext(self) -> Outputs | None:
        """The next `Outputs`, or None at the end or once closed."""
        answer: Any = None if self._awaited is None else await self._await()
        while not self._closed:
            try:
                step = self._steps.send(answer)
            except (StopIteration, Stopped):
                return None
            if not isinstance(step, Await):
                return step  # type: ignore[no-any-return]
            answer = await self._await(step.coroutine)
        return None

    async def _await(self, coroutine: Coroutine[Any, Any, Any] | None = None) -> Any:
        """`coroutine`'s result (None: the await a cancelled `anext()` left)."""
        import asyncio

        if coroutine is not None:
            self._awaited = asyncio.ensure_future(coroutine)
        awaited = self._awaited
        assert awaited is not None
        kept = False  # left for the next `anext()`
        try:
            return await asyncio.shield(awaited)
        except Interrupt as carried:
            raise carried.error from None
        except asyncio.CancelledError:
            kept = not awaited.cancelled() and not self._closed
            if kept or not self._closed:
                raise  # this `anext()`'s task is cancelled (kept), or the user's code raised it
            return None
        finally:
            if not kept:
                self._awaited = None

    def close(self) -> None:
        """Stop: cancel the await in progress, and close the steps. Idempotent."""
        self._closed = True
        if self._awaited is not None:
            self._awaited.cancel()
        self._steps.close()

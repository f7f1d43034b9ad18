"""The scheduler of the threaded pipeline: jobs, windows and ordered results, thread-safe.

    ChunkPlanner --chunks--> workers: RECORDS stage (read + per-record ops [+ batches])
        --> OrderedResults --> consumer
    fused plan's first batch: PARTS on every thread that asks --> JOIN --> as RECORDS job 0
    tail plan only:  RECORDS stage --> OrderedResults --> TailBatcher --batches-->
        workers: BATCHES stage --> OrderedResults --> consumer

Workers pull their work here (`next_work`), so nothing coordinates a chunk but
one short critical section on each side: a worker takes a job when the window
has room and puts its result back; the consumer takes results in order and
releases their window weight. Jobs whose next segment is asynchronous (async
sources, `async def` maps) go to an event loop through an `AsyncRunner` and
come back as resumable work. Everything here is quick bookkeeping under one
lock; no user code runs under it. Methods whose names end in `_locked` must
be called holding that lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from aioloader._common.calls import Stopped
from aioloader._common.positions import Position
from aioloader._common.wakeup import Wakeup
from aioloader._observability.meter import Meter
from aioloader._program.jobs import ChunkJob, Outputs
from aioloader._program.program import Plan, Program, Stage
from aioloader._scheduling.first_batch import FirstBatch
from aioloader._scheduling.planner import WINDOW_BYTES, output_bytes, plan_chunks
from aioloader._scheduling.reassembly import OrderedResults
from aioloader._scheduling.window import Window
from aioloader._scheduling.work import Place, SegmentRunner, Work

if TYPE_CHECKING:  # imported when figures are asked for: see `aioloader._observability`
    from aioloader._observability.statistics import BufferStatistics


class AsyncRunner(Protocol):
    """Runs the asynchronous segments of `Work` on an event loop."""

    def submit(self, work: Work) -> None: ...


class _Stage:
    """The bookkeeping of one stage: its window, its results in order, and its jobs."""

    __slots__ = ("exhausted", "issued", "name", "pending", "results", "window")

    def __init__(self, name: Stage, window: Window) -> None:
        self.name, self.window = name, window
        self.results: OrderedResults[Any] = OrderedResults()
        self.pending: deque[tuple[Any, int]] = deque()  # jobs cut by the tail
        self.issued = 0
        self.exhausted = False  # no job will be issued any more

    def drained(self) -> bool:
        return self.exhausted and not self.pending and self.results.next == self.issued


class Scheduler:
    """Work for the workers and outputs for the consumer, in order, within the windows."""

    def __init__(self, program: Program, position: Position, capacity: int, workers: int) -> None:
        """Work from `position` for `workers` threads, with at most `capacity` records
        (the first stage's window) read and not yet delivered."""
        self.program = program
        self._lock = threading.RLock()  # it knows its owner: see `Wakeup.wait`
        self._work_ready = threading.Condition(self._lock)
        self._result_ready = Wakeup(self._lock)
        # Several chunks per worker must fit in the window, or workers starve.
        self._shared_chunks = capacity // (workers + 1)
        self._capacity, self._workers = capacity, workers
        self._planner, self._tail = plan_chunks(program, position, self._shared_chunks)
        self.records = _Stage(Stage.RECORDS, Window(capacity))
        self.batches: _Stage | None = None  # the tail plan's second stage
        if self._tail is not None:
            self.batches = _Stage(Stage.BATCHES, Window(max(1, capacity // self._tail.batch_size)))
        # The stage whose results the consumer takes.
        self._final = self.records if self.batches is None else self.batches
        self._resumable: deque[Work] = deque()
        self._first: FirstBatch | None = None  # the first batch, while its parts are made
        self._cuts_first = program.plan is Plan.FUSED and not self.needs_async_runner
        self._measuring = False  # the first chunk is out: size the others from its cost
        self._consumer_waits = False  # in `get` or `aget`, for an answer not there yet
        self._closed = False
        self._broken: BaseException | None = None
        self._async_runner: AsyncRunner | None = None
        self._inline = False  # the consumer runs the jobs in `get` (see `run_inline`); workers start none
        self._held = 0  # jobs the workers took from `next_work` and have not handed back
        self.work_seconds = 0.0  # CPU seconds of the jobs done so far (the tuner reads them)
        self.jobs_done = 0

    def use_async_runner(self, runner: AsyncRunner) -> None:
        """Where asynchronous segments run (needed when the program has any)."""
        self._async_runner = runner

    def run_inline(self, inline: bool) -> None:
        """With `inline`, the consumer's `get` runs the next job itself instead of waiting,
        and workers start no new job (they finish the ones they hold); without, the
        workers take the jobs again. Any thread."""
        with self._lock:
            self._inline = inline
            # One job at a time inline: it may take the whole window, as `worker_count=0` does.
            self._planner.limit(self._capacity if inline else self._shared_chunks)
            self._wake_workers_locked()

    def progress(self) -> tuple[int, int]:
        """(jobs issued, results taken) of the stage whose results the consumer takes: the
        results of the jobs issued so far have all been taken once the second reaches the
        first (a moment's view, any thread)."""
        final = self._final
        return final.issued, final.results.next

    @property
    def needs_async_runner(self) -> bool:
        """True when some segment must be awaited on an event loop."""
        return self.program.awaits()

    # The workers' side.

    def next_work(self, wait: bool = True, meter: Meter | None = None) -> Work | None:
        """The next piece of work for a worker; None once the scheduler is closed.

        Waits for work unless `wait` is false: then None also means that no
        work may start now (a driver that polls, or a test driving by hand).
        Time spent waiting goes to `meter`: for room when the records window
        is full (the consumer is behind), for input otherwise.
        """
        with self._lock:
            while not self._closed:
                work = self._first_work_locked()
                if work is None:
                    work = self._resumable.popleft() if self._resumable else self._worker_work_locked()
                if work is not None:
                    self._held += 1
                    return work
                if not wait:
                    return None
                if meter is None:
                    self._work_ready.wait()
                else:
                    self._wait_counted_locked(meter)
            return None

    def _wait_counted_locked(self, meter: Meter) -> None:
        records = self.records
        full = not records.exhausted and not self._room_locked(self._planner.peek())
        started = time.perf_counter()
        self._work_ready.wait()
        if full:
            meter.waiting_for_room += time.perf_counter() - started
        else:
            meter.waiting_for_input += time.perf_counter() - started

    def _worker_work_locked(self) -> Work | None:
        return None if self._inline else self._new_work_locked()

    def _new_work_locked(self) -> Work | None:
        # Batches first: they are closer to the consumer than new chunks.
        batches = self.batches
        if batches is not None and batches.pending and batches.window.fits(batches.pending[0][1]):
            work = self._issue_locked(batches, *batches.pending.popleft())
            self._after_records_progress_locked()  # room to cut the next batches
            return work
        records = self.records
        if self._measuring or records.exhausted:
            return None
        if not self._room_locked(self._planner.peek()):
            return None
        job = self._planner.next_job()
        if job is None:
            records.exhausted = True
            self._after_records_progress_locked()
            return self._new_work_locked()  # the tail's last batches may be waiting now
        self._measuring = records.issued == 0
        if self._measuring and self._cuts_first and not self._inline:
            return self._cut_first_locked(job)
        return self._issue_locked(records, job, job.count)

    def _cut_first_locked(self, job: ChunkJob) -> Work:
        """Issue the first chunk as job 0 of the records stage, in parts for the workers (and
        the consumer's thread while they start: see `_scheduling/first_batch`) where it has
        more than one."""
        batch = self.program.operations.batch
        assert batch is not None, "only the fused plan cuts its first batch"
        parts = FirstBatch.parts(job, self._workers)
        if parts == 1:
            return self._issue_locked(self.records, job, job.count)
        self.records.window.take(job.count)
        self.records.issued += 1
        first = self._first = FirstBatch(job, parts, batch, self._workers)
        self._work_ready.notify_all()
        work = first.take()
        assert work is not None
        return work

    def _first_work_locked(self, consumer: bool = False) -> Work | None:
        """A part of the first batch, or its join, that no thread has taken yet (for the
        `consumer`'s thread, see `FirstBatch.take`)."""
        return None if self._first is None else self._first.take(consumer)

    def _room_locked(self, records: int) -> bool:
        """Whether a chunk of `records` fits the records window: within its capacity and,
        once `workers + 2` such chunks are in flight (one a worker, one done, one
        spare), within `WINDOW_BYTES` of outputs. Records of 37 KB (64x64x3 images) filled
        Grain's default window of 500 with 18 MiB while the consumer took one batch."""
        window = self.records.window
        if not window.fits(records):
            return False
        per_record = self._planner.bytes_per_record
        if per_record is None or window.in_use < (self._workers + 2) * records:
            return True
        return (window.in_use + records) * per_record <= WINDOW_BYTES

    def _issue_locked(self, stage: _Stage, job: Any, weight: int) -> Work:
        stage.window.take(weight)
        stage.issued += 1
        return Work(stage.name, stage.issued - 1, job, weight)

    def advance(self, work: Work, worker: bool = False) -> None:
        """Send `work` on after its last segment ran (any thread): to the event loop,
        back to the workers, or, with no segment left, to the ordered results.
        `worker`: the worker that took `work` from `next_work` hands it back."""
        place = work.place(self.program)
        with self._lock:
            if worker:
                self._held -= 1
                if not self._held and self._inline:
                    self._wake_consumer_locked()  # it may run jobs now (see `get`)
            if place is Place.LOOP:
                pass  # submitted below, outside the lock
            elif self._closed:
                return  # nobody will take it: keep nothing
            elif place is Place.WORKER:
                self._resumable.append(work)
                self._work_ready.notify()
                return
            else:
                self._complete_locked(work)
                return
        assert self._async_runner is not None, "a program with async segments needs an AsyncRunner"
        self._async_runner.submit(work)

    def _complete_locked(self, work: Work) -> None:
        if work.stage is Stage.PARTS or work.stage is Stage.JOIN:
            whole = self._first_done_locked(work)
            if whole is None:
                return
            work = whole
        stage = self.records if work.stage is Stage.RECORDS else self._final  # BATCHES: the final stage
        stage.results.put(work.seq, work.payload, work.weight)
        self.work_seconds += work.seconds
        self.jobs_done += 1
        if work.stage is Stage.RECORDS:
            at_once = self.program.reads_at_once()
            self._planner.observe(work.weight, work.seconds, work.wall, output_bytes(work.payload), at_once)
            if self._measuring and not self._hold_for_consumer_locked():
                self._measuring = False
                self._wake_workers_locked()
            if self._tail is not None:
                self._after_records_progress_locked()
                return
        if stage.results.ready():
            self._wake_consumer_locked()

    def _first_done_locked(self, work: Work) -> Work | None:
        """A part of the first batch, or its join, is done: the whole first chunk's work once
        the join is; else None, and the join goes to whichever thread asks first."""
        first = self._first
        if first is None:
            return None  # a part after a failed one, done after the join: nobody needs it
        whole = first.done(work)
        if whole is not None:
            self._first = None
        elif first.todo:
            self._work_ready.notify_all()
            self._wake_consumer_locked()
        return whole

    def _hold_for_consumer_locked(self) -> bool:
        """True to keep the workers from starting more chunks once the first is done,
        until the consumer waiting for it has taken it (`_answer_locked` ends the hold).

        With a busy worker on every core, the woken consumer may wait a whole
        scheduling period for a core (100 ms on a loaded machine): the first
        output is handed over first. Only when the first chunk makes the first
        output itself (no tail plan), and only while a thread waits in `get`:
        `start_prefetch()` fills the window before the first `next()`, and an
        `async for` keeps its timing (its loop runs the async segments too, and
        an iterator left open at `asyncio.run`'s end must find them started)."""
        return self._tail is None and self._consumer_waits

    def _after_records_progress_locked(self) -> None:
        """Tail plan: move RECORDS results, in order, through the tail into batch jobs."""
        records, batches = self.records, self.batches
        if self._tail is None or batches is None:
            self._wake_consumer_locked()  # the end may have come
            return
        # Cut batches only once the last ones went to the workers: elements wait
        # in the record window, which bounds them, rather than in `pending`.
        while records.results.ready() and not self._tail.failed and not batches.pending:
            elements, weight = records.results.take()
            # Elements leave the record window once the tail holds them; the tail
            # holds less than one batch, and batches have their own window.
            records.window.release(weight)
            batches.pending.extend((job, max(1, len(job.plan.groups))) for job in self._tail.push(elements))
        if not batches.exhausted and (self._tail.failed or records.drained()):
            batches.pending.extend((job, len(job.plan.groups)) for job in self._tail.finish())
            batches.exhausted = records.exhausted = True
        self._wake_workers_locked()
        self._wake_consumer_locked()

    def fail(self, error: BaseException) -> None:
        """A worker or the loop met an error that is not the user's data: stop, and tell the consumer.

        Once the scheduler is closed, nobody waits for an answer: errors that
        closing caused (a read cancelled in the pool) are not the consumer's.
        """
        with self._lock:
            if self._closed:
                return
            self._broken = self._broken or error
            self._closed = True
            self._work_ready.notify_all()
            self._wake_consumer_locked()

    # The consumer's side.

    def get(self, runner: SegmentRunner | None = None) -> tuple[Outputs, int] | None:
        """The next outputs and their weight (blocking), or None at the end.

        Hand the weight back with `release` once the outputs are delivered.
        With `runner`, the caller runs a job itself rather than wait for a
        worker to take it: the first job, if no worker has taken it yet (a
        worker starts by copying the operations, which can take tens of
        milliseconds: the first output need not wait for it), and in inline
        mode (`run_inline`) every job, as long as the window has room for one
        and no worker still holds one (so that no more threads than the
        workers ever run the user's code at once). A close from another
        thread stops such a job between two records, and then this answers
        the end. The parts of the first batch that no worker has taken yet, it
        runs too (see `_scheduling/first_batch`).
        """
        while True:
            with self._lock:
                if self._answerable_locked():
                    return self._answer_locked()
                first = not self.records.issued and not self._held
                work = (
                    self._new_work_locked()
                    if runner and (first or (self._inline and not self._held))
                    else None
                )
                if work is None and runner is not None:
                    work = self._first_work_locked(consumer=True)
                if work is None:
                    if not self._answerable_locked():  # asking for work may have found the end
                        self._consumer_waits = True
                        self._result_ready.wait()
                    continue
            try:
                while work.place(self.program) is Place.WORKER:
                    work.run_segment(runner)  # type: ignore[arg-type]  # not None when `work` is
            except Stopped:
                return None  # closed meanwhile: nobody takes the work's place in the window
            self.advance(work)

    def has_answer(self) -> bool:
        """True when `get` would return at once: the next outputs in order, the end, or an error."""
        with self._lock:
            return self._answerable_locked()

    async def aget(self) -> tuple[Outputs, int] | None:
        """`get` for a consumer on an event loop: waits without blocking the loop."""
        while True:
            with self._lock:
                if self._answerable_locked():
                    return self._answer_locked()
                waiter = self._result_ready.arm()
            await waiter

    def _answerable_locked(self) -> bool:
        final = self._final
        return self._broken is not None or final.results.ready() or self._closed or final.drained()

    def _answer_locked(self) -> tuple[Outputs, int] | None:
        """The next result, or None at the end (after `_answerable_locked`)."""
        if self._broken is not None:
            raise self._broken
        self._consumer_waits = False
        if self._measuring:  # held for the consumer (`_hold_for_consumer_locked`), or closed
            self._measuring = False
            self._wake_workers_locked()
        final = self._final
        return final.results.take() if final.results.ready() else None

    def _wake_consumer_locked(self) -> None:
        self._result_ready.wake()

    def _wake_workers_locked(self) -> None:
        """Wake the workers waiting for work; none while inline: they would only wait again
        (on a GIL build, taking the GIL from the consumer each time)."""
        if not self._inline:
            self._work_ready.notify_all()

    def release(self, weight: int) -> None:
        """Give back the window weight of outputs the consumer has delivered."""
        with self._lock:
            self._final.window.release(weight)
            self._wake_workers_locked()

    def widen(self, records: int) -> None:
        """Let the records window hold `records` (if that is more than it does): more read
        ahead for more read threads (`worker_count="auto"`)."""
        with self._lock:
            if records > self.records.window.capacity:
                self.records.window.capacity = records
                self._wake_workers_locked()

    def buffers(self) -> list[BufferStatistics]:
        """Each stage's window: weight in flight (issued, or done and not yet delivered)
        against its bound, and its peak (a job bigger than the bound may pass alone)."""
        from aioloader._observability.statistics import BufferStatistics

        with self._lock:
            stages = [self.records] if self.batches is None else [self.records, self.batches]
            return [
                BufferStatistics(f"{stage.name.value} window", *stage.window.statistics()) for stage in stages
            ]

    def close(self) -> None:
        """Stop handing out work and drop every result; idempotent, any thread.

        Segments running on the workers stop before their next read or call
        of user code (the program's `shutdown`).
        """
        self.program.shutdown.set()
        with self._lock:
            self._closed = True
            for stage in (self.records, self._final):
                stage.results.clear()
                stage.pending.clear()
            self._resumable.clear()
            self._first = None
            if self._tail is not None:
                self._tail.clear()
            self._work_ready.notify_all()
            self._wake_consumer_locked()

"""How many threads run the chunks, measured while the loader runs: the workers, or the consumer's own.

The output never depends on which thread runs a chunk (each chunk's result
is a pure function of its indices, reassembled in order), so the loader may
change how many workers run chunks at any moment, or let the consumer's
thread run them itself, as `worker_count=0` does (level 0). `Tuner` chooses
the level by measuring, because what is fastest depends on the work, the
interpreter and the machine:

* a chunk handed to a worker costs a hand-off: the scheduler's lock and a
  wake-up on each side (20 to 60 us a round trip on a 2-core machine), and a
  core for the worker. When records cost less than a hand-off, or the work
  holds the GIL (pure Python, or NumPy's small calls on a GIL build), the
  consumer's thread delivers faster by itself;
* more workers are not always faster either: two threads of NumPy's small
  calls ran slower than one on CPython 3.13t here (64,000 against 78,000
  images a second).

A fixed `worker_count=N` chooses between N workers and the consumer's thread
(levels 0 and N); `worker_count="auto"` between 0 and the CPUs the process
may use. With `async for` the consumer is the event loop, where user code
must not run: there is no level 0.

The tuner runs in the consumer's thread, from `ThreadedEngine.next`/`anext`.
It counts the window weight delivered (records, or batches for the tail plan)
per second of wall time in phases of `PHASE_SECONDS`, the consumer's own work
included: at level 0 the consumer does the loader's work between its own
steps, and only a faster loop overall is worth it. A phase starts with the
first output of a job issued at its level (jobs issued before a change ran at
the level before), once every worker has made its copy of the operations.
Where workers ran from the start, the first phase only warms up (the
outputs they made while the consumer started come at once: they would make
one worker look as fast as two); from the consumer's thread ("auto"), nothing
was made ahead, and the first phase counts. Once the rate has settled (two
phases at the level, the last not `RISING` times faster than the one
before), the tuner tries a neighbouring level for a phase, two for new
threads or the consumer's thread (`_neighbours`: from workers, one more,
one fewer, the consumer's thread; from the consumer's thread, the workers
it left and one more, since one worker may lose to it where two win; of
these, the one measured longest ago) and keeps it if its better phase
delivered at least `MARGIN` times faster than the better of the last two
phases before (a trial that delivers at less than `LOSING` of that rate
ends after `EARLY` of a phase, but for the first phase of new threads); after such
a win, the next trial comes as soon as the rate has settled (climbing is
quick). A trial that lost doubles the phases before the next one, whichever
level that tries (`FIRST_HOLD`, then up to `MAX_HOLD`: a few seconds): one
schedule for all the neighbours, so that a run that has settled pays for one
trial at a time, and less and less often.
There is no trial:

* while the rate still rises (`_settled`): a cache warming up makes the
  level running then look slow, and a trial that beats it leaves it for
  long (Parquet on 3.11: the consumer's thread measured 80,000 rows/s in
  its first phase after the warm-up, cold, and 150,000 warm; two workers,
  120,000, won the trial against the cold phase, and the consumer's
  thread's turn would have come again some 25 phases later, past the end
  of the run);
* of more workers, while the consumer waits for less than `WAITING` of a
  phase (the loader keeps up), nor above the memory bound of "auto";
* of the consumer's thread, while the threads keep up, or clearly pay off:
  their chunks ran on `PARALLEL` cores at once and took `LONG_CHUNK` of CPU
  time or more each, so that a hand-off is a small part of a chunk. Not with
  the GIL on: there, threads that pass the GIL back and forth burn CPU
  without progress (NumPy's small calls on 3.11: two workers kept 1.4 to
  1.6 cores busy at half the rate of the consumer's thread alone, and a
  run that crossed `PARALLEL` never tried it).

"auto" also follows two rules that need no trial: above its memory bound it
drops a worker and halves the read threads at once; and where reads go
through the read pool (a slow source) and take most of the workers' time, it
doubles the read threads (see `AutoReads`) instead of trying a worker more.
Statistics show the level chosen (`worker_count`, 0 when the consumer's
thread runs the chunks), not a level under trial.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Sequence

from aioloader._executors.autoscale import AutoReads, resident_bytes
from aioloader._executors.threads import WorkerThreads
from aioloader._observability.meter import Meters
from aioloader._scheduling.scheduler import Scheduler

PHASE_SECONDS = 0.025  # one measurement ...
MIN_OUTPUTS = 4  # ... of at least this many outputs
FIRST_HOLD = 8  # phases before the first trial from a new level; each trial that lost doubles it
MAX_HOLD = 128  # the most phases between two trials
MARGIN = 1.1  # a trial must deliver this much faster to change the level
LOSING = 0.5  # ... and one this much slower after `EARLY` of a phase ends there
EARLY = 0.25
RISING = 1.1  # a phase this much faster than the one before: the rate still rises, no trial yet
WAITING = 0.1  # the consumer waited less than this share of a phase: the loader keeps up
PARALLEL = 1.5  # cores the workers' chunks ran on at once ...
LONG_CHUNK = 0.0005  # ... with this much CPU time per chunk: the threads pay off
READS_SHARE = 0.5  # reads took this share of the workers' busy time: reads are what limits
# Whether the GIL is on now (a free-threaded build may turn it on to import an extension).
GIL_ENABLED: Callable[[], bool] = getattr(sys, "_is_gil_enabled", lambda: True)


class Tuner:
    """Chooses the level (workers running chunks; 0: the consumer's thread); see the module
    docstring. Called by the consumer's thread only (`delivered`), so it needs no lock."""

    def __init__(
        self,
        scheduler: Scheduler,
        workers: WorkerThreads,
        levels: Sequence[int],
        memory_limit: int | None = None,
        reads: AutoReads | None = None,
        meters: Meters | None = None,
        read_keys: frozenset[Hashable] = frozenset(),
        clock: Callable[[], float] = time.perf_counter,
        copyable: Callable[[], bool] | None = None,
        gil_enabled: Callable[[], bool] = GIL_ENABLED,
    ) -> None:
        """Tune among `levels` (ascending), from the highest below or at the workers running now.

        `memory_limit`, `reads` and `meters` (with the `read_keys` of its read
        stage) are "auto"'s: its memory bound, its read threads, and the
        workers' counters that tell how much of their time reads take. `clock` times
        the phases (tests drive their own). `copyable`, asked once before workers
        first start from the consumer's thread, says whether the operations can be
        copied for them: if not, the consumer's thread keeps the chunks, as
        `worker_count=0` would (an error there, at a point that timing chose, would
        make the output depend on it). `gil_enabled` is asked at each decision (an
        extension module may turn the GIL on while the loader runs)."""
        self._clock, self._copyable, self._gil_enabled = clock, copyable, gil_enabled
        self._scheduler, self._workers, self._levels = scheduler, workers, list(levels)
        self._memory_limit, self._reads, self._meters, self._read_keys = (
            memory_limit,
            reads,
            meters,
            read_keys,
        )
        self.level = max((level for level in self._levels if level <= workers.count()), default=levels[0])
        self._threads = max(1, self.level)  # the workers of the last level that had some
        if self.level == 0:
            scheduler.run_inline(True)
        self._trial: tuple[int, float] | None = None  # (the level it left, that level's last rate)
        self._trial_starts_threads = False  # its first phase then runs whole (see `_clearly_losing`)
        # The phases measured, the last one measured at each level (-1: none yet), the
        # phases until the next trial (the first as soon as the rate has settled after the
        # warm-up: runs may be short) and the hold the last trial that lost set.
        self._phases = 0
        self._warm_up = self.level > 0  # workers ran before the consumer asked (see `_end_phase`)
        self._measured = dict.fromkeys(self._levels, -1)
        self._hold, self._backoff = 1, FIRST_HOLD
        self._onward: int | None = None  # the next level the same way, after a trial won
        self._settling = True  # outputs start a phase once jobs issued since `_changed_at` come
        self._changed_at = 0
        self._start = self._waited = self._work = self._busy = self._reading = 0.0
        self._weight = self._outputs = self._jobs = 0
        self._rates: list[float] = []  # the last phases' rates at this level

    @property
    def chosen(self) -> int:
        """The level chosen: the one before a trial, while one runs (any thread)."""
        trial = self._trial  # read once: the consumer may end the trial meanwhile
        return self.level if trial is None else trial[0]

    def delivered(self, weight: int, waited: float) -> None:
        """The consumer got outputs of `weight` after `waited` seconds in `next()`."""
        now = self._clock()
        if self._settling:
            # The jobs issued before the last change ran at the level before: the phase
            # starts with the first output of a job issued since, once every worker has made
            # its copy of the operations (a large vocabulary takes tens of milliseconds).
            self._settling = self._scheduler.progress()[1] <= self._changed_at or not self._workers.ready()
            if not self._settling:
                self._begin(now)
            return
        self._weight += weight
        self._waited += waited
        self._outputs += 1
        span = now - self._start
        losing = self._clearly_losing(span)
        if (span >= PHASE_SECONDS and self._outputs >= MIN_OUTPUTS) or losing:
            self._end_phase(span, losing)
            if not self._settling:
                self._begin(now)

    def _clearly_losing(self, span: float) -> bool:
        """True when a trial delivers at less than `LOSING` of the rate of the level it left
        after `EARLY` of a phase: it ends there (a losing trial of two workers on 3.11 ran a
        whole phase at a third of level 0's rate). A trial that started threads runs its
        first phase whole (a new thread may start late), not its second (on 3.13t, trivial
        records: two new workers ran both phases at 0.45 of level 0's rate)."""
        trial = self._trial
        return (
            trial is not None
            and (len(self._rates) == 1 or not self._trial_starts_threads)
            and self._outputs >= MIN_OUTPUTS
            and span >= EARLY * PHASE_SECONDS
            and self._weight < LOSING * trial[1] * span
        )

    def _begin(self, now: float) -> None:
        self._start, self._weight, self._waited, self._outputs = now, 0, 0.0, 0
        self._work, self._jobs = self._scheduler.work_seconds, self._scheduler.jobs_done
        self._busy, self._reading = self._worker_times()

    def _end_phase(self, span: float, losing: bool = False) -> None:
        rate = self._weight / span
        self._phases += 1
        self._measured[self.level] = self._phases
        if self._phases == 1 and self._warm_up:
            # Warming up: the outputs the workers made while the consumer started come
            # at once, and one worker measured as fast as two (3.13t, the cpu benchmark).
            return
        self._rates = [*self._rates[-1:], rate]  # this level's last two (a trial compares with both)
        if self._trial is not None:
            self._judge(max(self._rates), losing)
        elif self._over_memory():
            self._shrink()
        elif self._reads_limit(span):
            assert self._reads is not None
            self._reads.grow()
        else:
            self._hold -= 1
            if self._hold <= 0 and self._settled():
                self._try_another(span)

    def _settled(self) -> bool:
        """True once two phases at this level were measured and the last was not `RISING` times
        faster than the one before: a rate that still rises (a cache warming up, a worker
        starting late) is no baseline for a trial, which would beat it and leave it."""
        return len(self._rates) == 2 and self._rates[1] < RISING * self._rates[0]

    def _judge(self, rate: float, losing: bool) -> None:
        """End a trial: keep its level if it delivered `MARGIN` times faster (and try the next
        at once), else go back and wait twice as long as last time before the next trial.

        A trial of new threads or of the consumer's thread that neither wins at once nor is
        `losing` clearly runs a second phase and is judged by the faster, as the level it
        left is (the faster of its last two). A new thread may start late (on 3.13t, tens
        of milliseconds on a busy machine: one phase without it lost a trial that won by
        1.8 times later); on a busy machine one phase of the consumer's thread, at 0.96 of
        the workers' better phase, lost a trial it would have won by 1.5 times (3.11, NumPy
        images: the run then kept the slower workers for 55 phases). Workers that wait
        (tried again from the consumer's thread) get one phase: where they lose, they lose
        narrowly and often (trivial records on 3.13t: two phases at 0.9 of its rate, each
        trial, cost "auto" a tenth of its rate)."""
        assert self._trial is not None
        before, before_rate = self._trial
        won = rate >= before_rate * MARGIN
        phases = 2 if self.level == 0 or self._trial_starts_threads else 1  # at most (see above)
        if not won and not losing and len(self._rates) < phases:
            return  # one more phase
        self._trial = None
        if won:
            onward = self.level + (1 if self.level > before else -1)
            self._onward = onward if self.level and onward in self._measured else None
            self._hold = 1 if self._onward is not None else FIRST_HOLD
            self._backoff = FIRST_HOLD
            return
        self._backoff = min(MAX_HOLD, 2 * self._backoff)
        self._hold = self._backoff
        self._set(before)

    def _try_another(self, span: float) -> None:
        """Try the next level the same way after a win, else the neighbouring level measured
        longest ago (see `_neighbours`), if any."""
        neighbours = self._neighbours(span)
        onward, self._onward = self._onward, None
        if onward is not None and onward not in neighbours:
            self._hold = FIRST_HOLD  # no way on: the neighbours wait, as after any win
        elif neighbours:
            level = onward if onward is not None else min(neighbours, key=self._measured.__getitem__)
            if level and not self._workers_may_start():
                return
            self._trial = (self.level, max(self._rates))  # a phase slowed by chance is no baseline
            self._trial_starts_threads = level > self._workers.count()
            self._set(level)

    def _workers_may_start(self) -> bool:
        """False, from then on at level 0 alone, if the operations cannot be copied for workers."""
        copyable, self._copyable = self._copyable, None  # asked once
        if copyable is not None and not copyable():
            self._levels = [0]
            return False
        return True

    def _neighbours(self, span: float) -> list[int]:
        """The levels next to this one that a trial may try (the one measured longest ago,
        the first of those never measured).

        From the consumer's thread: the workers it left (one, at the start), and one
        more while the consumer waits (one worker may lose to the consumer's thread
        where two win: neither is then left out; never measured, it goes first).
        From workers: one more while the consumer waits, within the memory bound
        (the loader is behind: more threads are what helps most often), then one
        fewer, then the consumer's thread where the threads may lose."""
        more = self._waited >= WAITING * span and not self._over_memory()
        if self.level == 0:
            ahead = [self._threads + 1] if more else []
            return [level for level in [*ahead, self._threads] if level in self._levels]
        above = [level for level in (self.level + 1,) if more and level in self._levels]
        below = [level for level in (self.level - 1,) if level > 0 and level in self._levels]
        below += [0] if self._levels[0] == 0 and self._threads_may_lose(span) else []
        return above + below

    def _started(self, level: int) -> bool:
        """Start the workers `level` wants more than run now.

        False if the system refuses a thread ("can't start new thread": a limit on threads
        or memory): the levels above the workers running are then left out for good and
        the trial, if one was starting, ends, as for operations that cannot be copied (a
        failure at a moment that timing chose would make the run's end depend on it). With
        no level left (`async for`, no worker running), the error is the run's."""
        try:
            self._workers.add(level - self._workers.count())
        except RuntimeError:
            allowed = [each for each in self._levels if each <= self._workers.count()]
            if not allowed:
                raise
            self._levels, self._trial = allowed, None
            return False
        return True

    def _threads_may_lose(self, span: float) -> bool:
        """False while the threads keep up with the consumer, or clearly pay off (never
        with the GIL on: see the module docstring)."""
        if self._waited < WAITING * span:
            return False
        if self._gil_enabled():
            return True
        work = self._scheduler.work_seconds - self._work
        jobs = self._scheduler.jobs_done - self._jobs
        return not (work / span >= PARALLEL and jobs and work / jobs >= LONG_CHUNK)

    def _over_memory(self) -> bool:
        return self._memory_limit is not None and resident_bytes() > self._memory_limit

    def _shrink(self) -> None:
        """Above the memory bound: one worker fewer (never the consumer's thread alone:
        inline, the window is the same), and half the read threads."""
        index = self._levels.index(self.level)
        if index > 0 and self._levels[index - 1] > 0:
            self._set(self._levels[index - 1])
        if self._reads is not None:
            self._reads.shrink()

    def _reads_limit(self, span: float) -> bool:
        """True when reads through the read pool took most of the time of the threads running chunks while the
        consumer waited, and the read threads may grow ("auto" only)."""
        if self._reads is None or not self._reads.waiting():
            return False
        if self._waited < WAITING * span:
            return False
        busy, reading = self._worker_times()
        return reading - self._reading > READS_SHARE * max(busy - self._busy, 1e-9)

    def _worker_times(self) -> tuple[float, float]:
        """The seconds so far of the threads that run chunks (the workers, and the consumer's
        at level 0): busy in steps, and busy reading ("auto" only)."""
        busy = reading = 0.0
        for meter in self._meters.all() if self._meters is not None else ():
            if meter.role in ("steps", "pipeline"):
                for key, (_, seconds, _) in meter.copy_steps().items():
                    busy += seconds
                    reading += seconds if key in self._read_keys else 0.0
        return busy, reading

    def _set(self, level: int) -> None:
        """Run chunks at `level`: that many workers, or the consumer's thread for 0."""
        if level > self._workers.count() and not self._started(level):
            level = self._levels[-1]  # the most the system gave
        self.level = level
        self._threads = level or self._threads
        self._settling = True
        self._rates = []
        self._changed_at = self._scheduler.progress()[0]
        if level == 0:
            self._scheduler.run_inline(True)
            return
        while self._workers.count() > level:
            self._workers.retire()
        self._scheduler.run_inline(False)

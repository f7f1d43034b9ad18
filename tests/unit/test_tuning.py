"""`Tuner`: which level (worker threads, or the consumer's own thread) runs the chunks, decided from
measured delivery rates, driven here by hand with a clock of the test's own."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from aioloader._executors import tuning
from aioloader._executors.tuning import Tuner

PHASE = tuning.PHASE_SECONDS
FIRST_TRIAL = 3  # phases before the first trial: the warm-up, and two that show a settled rate
# ... where the consumer's thread ran the chunks from the start: nothing made ahead, no warm-up
FIRST_TRIAL_INLINE = 2


@dataclass
class FakeScheduler:
    """What the tuner reads of a scheduler, and the inline switch it turns."""

    issued: int = 0
    taken: int = 0
    work_seconds: float = 0.0
    jobs_done: int = 0
    inline: list[bool] = field(default_factory=list)

    def progress(self) -> tuple[int, int]:
        return self.issued, self.taken

    def run_inline(self, inline: bool) -> None:
        self.inline.append(inline)


@dataclass
class FakeWorkers:
    running: int

    def count(self) -> int:
        return self.running

    def add(self, count: int = 1) -> None:
        self.running += count

    def retire(self) -> None:
        self.running -= 1

    def ready(self) -> bool:
        return True


class Run:
    """A tuner over fakes, fed outputs as a loader at a given speed per level would feed it."""

    def __init__(self, levels: list[int], workers: int, speed: dict[int, float], **kwargs: object) -> None:
        self.now = 0.0
        self.scheduler = FakeScheduler()
        self.workers = FakeWorkers(workers)
        self.speed = speed  # outputs of weight 1 per second at each level
        self.tuner = Tuner(self.scheduler, self.workers, levels, clock=lambda: self.now, **kwargs)  # type: ignore[arg-type]
        self.levels: list[int] = []

    def outputs(self, count: int, waited: float = 1.0, cpu_per_job: float = 0.0) -> None:
        """`count` outputs, each a job issued and taken; `waited`: the share of the time the
        consumer spent in `next()`; `cpu_per_job`: the CPU each job took on its thread."""
        for _ in range(count):
            gap = 1.0 / self.speed[self.tuner.level]
            self.now += gap
            self.scheduler.issued += 1
            self.scheduler.taken += 1
            self.scheduler.jobs_done += 1
            self.scheduler.work_seconds += cpu_per_job
            self.tuner.delivered(1, waited * gap)
            self.levels.append(self.tuner.level)


def phases(count: int, speed: float) -> int:
    """Outputs that make `count` phases at `speed` outputs a second (one more to start)."""
    per_phase = max(tuning.MIN_OUTPUTS, math.ceil(PHASE * speed))  # speeds here keep off whole numbers
    return 1 + count * per_phase


def test_a_consumer_thread_twice_as_fast_takes_over_and_statistics_show_it_once_chosen() -> None:
    run = Run([0, 2], 2, {2: 1100, 0: 2300})
    run.outputs(phases(FIRST_TRIAL, 1100))  # a phase to warm up, two of the workers: then the trial
    assert run.tuner.level == 0
    assert run.tuner.chosen == 2
    assert run.scheduler.inline == [True]
    run.outputs(phases(1, 2300))
    assert run.tuner.chosen == 0  # it delivered twice as fast: kept


def test_a_trial_that_loses_goes_back_and_waits_twice_as_long_before_the_next() -> None:
    run = Run([0, 2], 2, {2: 2300, 0: 1100})
    trials: list[float] = []  # when each trial began
    while len(trials) < 4:
        before = len(run.scheduler.inline)
        run.outputs(1)
        if len(run.scheduler.inline) > before and run.scheduler.inline[-1]:
            trials.append(run.now)
    assert run.tuner.chosen == 2
    assert run.scheduler.inline == [True, False] * 3 + [True]
    # After one phase, then holds of 2, 4 and 8 times FIRST_HOLD phases (plus the trial's own).
    gaps = [(b - a) / PHASE for a, b in itertools.pairwise(trials)]
    for gap, hold in zip(gaps, [2, 4, 8], strict=True):
        assert hold * tuning.FIRST_HOLD < gap < (hold * tuning.FIRST_HOLD + 3) * 1.1, gaps


def test_no_trial_of_the_consumer_thread_while_the_threads_keep_up() -> None:
    run = Run([0, 2], 2, {2: 1100, 0: 5100})
    run.outputs(phases(40, 1100), waited=0.01)  # the consumer hardly waits: the loader keeps up
    assert run.scheduler.inline == []
    assert set(run.levels) == {2}


def test_no_trial_of_the_consumer_thread_while_the_threads_clearly_pay_off() -> None:
    run = Run([0, 2], 2, {2: 1100, 0: 5100}, gil_enabled=lambda: False)
    # Each job: 2 ms of CPU, finished at 1,100 a second: two cores busy, long chunks.
    run.outputs(phases(40, 1100), cpu_per_job=0.002)
    assert run.scheduler.inline == []


def test_with_the_gil_on_busy_threads_are_no_sign_that_they_pay_off() -> None:
    """Threads passing the GIL back and forth keep two cores busy at half the rate."""
    gil = [False]
    run = Run([0, 2], 2, {2: 1100, 0: 2300}, gil_enabled=lambda: gil[0])
    run.outputs(phases(FIRST_TRIAL + 2, 1100), cpu_per_job=0.002)
    assert run.scheduler.inline == []
    gil[0] = True  # an extension module turned it on: asked again at each decision
    run.outputs(phases(2, 1100), cpu_per_job=0.002)
    assert run.scheduler.inline == [True]
    run.outputs(phases(1, 2300))
    assert run.tuner.chosen == 0


def test_outputs_of_jobs_issued_before_a_change_are_not_measured() -> None:
    run = Run([0, 2], 2, {2: 1100, 0: 1100})
    run.outputs(phases(FIRST_TRIAL, 1100) - 1)  # past the warm-up and a settled rate
    run.scheduler.issued += 50  # jobs the workers hold when the level changes
    run.outputs(1)  # the phase ends: the trial starts, with the consumer's thread
    assert run.tuner.level == 0
    # Their outputs come fast (they were made by the workers meanwhile): not the trial's.
    for _ in range(50):
        run.now += 1e-5
        run.scheduler.taken += 1
        run.tuner.delivered(1, 1e-5)
    assert run.tuner.level == 0
    assert run.tuner.chosen == 2
    run.outputs(phases(1, 1100))
    assert run.tuner.chosen == 2  # as fast as the workers, not 10% faster: back to them


def test_the_outputs_ready_when_the_consumer_starts_are_not_measured() -> None:
    """A window's worth of outputs made while the consumer started comes at once: counted,
    one worker would look as fast as two, and the trial of two would lose. The first phase
    only warms up."""
    run = Run([0, 1, 2], 1, {0: 510, 1: 1010, 2: 1930}, memory_limit=1 << 62)
    run.scheduler.issued += 50  # issued, and made, before the first next()
    for _ in range(50):
        run.now += 1e-5
        run.scheduler.taken += 1
        run.tuner.delivered(1, 1e-5)
    run.outputs(phases(FIRST_TRIAL, 1010))
    assert 2 in run.levels  # tried after phases of one worker measured at its pace
    run.outputs(phases(2, 1930))
    assert run.tuner.chosen == 2


def test_auto_climbs_while_each_worker_more_is_faster_and_stops_where_it_is_not() -> None:
    speeds = {0: 510, 1: 1010, 2: 1930, 3: 2030, 4: 2070}
    run = Run([0, 1, 2, 3, 4], 1, speeds, memory_limit=1 << 62)
    run.outputs(20_000)
    assert run.tuner.chosen == 2  # 3 workers are not 10% faster than 2
    assert run.workers.running in (2, 3)  # 3 while a trial of it runs
    assert max(run.levels) <= 3


def test_auto_adds_no_worker_above_its_memory_bound() -> None:
    run = Run([0, 1, 2, 3, 4], 1, {0: 510, 1: 1010, 2: 2030, 3: 3030, 4: 4030}, memory_limit=1)
    run.outputs(5_000)
    assert max(run.levels) == 1
    assert run.workers.running == 1


def test_auto_starts_on_the_consumers_thread_and_tries_two_workers_first() -> None:
    """With no worker running, the consumer's thread runs the chunks from the start; the first
    trial is of two workers (one often runs no faster than the consumer's thread alone)."""
    run = Run([0, 1, 2, 3], 0, {0: 1000, 1: 1010, 2: 1930, 3: 2030}, memory_limit=1 << 62)
    assert run.tuner.level == 0
    assert run.scheduler.inline == [True]
    run.outputs(phases(FIRST_TRIAL_INLINE, 1000) - 1)
    assert run.tuner.level == 0  # one output short of two phases measured
    run.outputs(1)  # two measured (no warm-up: nothing was made ahead), the trial
    assert run.tuner.level == 2
    assert run.workers.running == 2
    run.outputs(phases(1, 1930))
    assert run.tuner.chosen == 2  # won in its first phase: kept at once


def test_a_trial_of_more_workers_slow_in_its_first_phase_gets_a_second() -> None:
    """A new worker may start late: a trial that started workers and lost its first phase
    runs one more, and is judged by the faster of the two."""
    run = Run([0, 1, 2], 1, {0: 500, 1: 1000, 2: 1000}, memory_limit=1 << 62)
    run.outputs(phases(FIRST_TRIAL, 1000))
    assert run.tuner.level == 2
    run.outputs(phases(1, 1000))  # as slow as one worker: the second one is not working yet
    assert (run.tuner.level, run.tuner.chosen) == (2, 1)
    run.speed[2] = 1930
    run.outputs(phases(1, 1930))
    assert run.tuner.chosen == 2


def test_a_trial_slower_by_chance_in_its_first_phase_gets_a_second() -> None:
    """Judged as the level it left, by the faster of two phases: on a busy machine the consumer's
    thread ran its first phase at 0.96 of the workers' better phase and every later one at 1.5
    times (3.11, NumPy images); judged on one phase, the run kept the slower workers."""
    run = Run([0, 2], 2, {2: 1000, 0: 960})
    run.outputs(phases(FIRST_TRIAL, 1000))
    assert run.tuner.level == 0  # the trial of the consumer's thread
    run.outputs(phases(1, 960))
    assert (run.tuner.level, run.tuner.chosen) == (0, 2)  # lost its first phase, not by half: a second
    run.speed[0] = 1500
    run.outputs(phases(1, 1500))
    assert run.tuner.chosen == 0


def test_a_trial_of_workers_already_waiting_is_judged_on_its_first_phase() -> None:
    """A fixed `worker_count` keeps its workers at level 0: tried again, they start at once,
    and where they lose they lose narrowly, often: one phase ends the trial (trivial records
    on 3.13t: two phases at 0.9 of level 0's rate, each trial, cost "auto" a tenth)."""
    run = Run([0, 2], 2, {2: 1000, 0: 2300})
    run.outputs(phases(FIRST_TRIAL, 1000) + phases(1, 2300))
    assert run.tuner.chosen == 0
    while run.tuner.level == 0:  # until the trial of the workers
        run.outputs(1)
    run.speed[2] = 2100
    run.outputs(phases(1, 2100))
    assert (run.tuner.level, run.tuner.chosen) == (0, 0)  # back after one phase


def test_one_schedule_for_all_neighbours_and_the_one_measured_longest_ago_goes_first() -> None:
    run = Run([0, 1, 2], 2, {0: 900, 1: 1000, 2: 2000}, memory_limit=1 << 62)
    tried = []
    for _ in range(phases(120, 2000)):
        before = run.tuner.level
        run.outputs(1)
        if run.tuner.level not in (before, 2):  # a trial began
            tried.append(run.tuner.level)
    assert tried[:3] == [1, 0, 1]
    assert run.tuner.chosen == 2


def test_no_trial_while_the_rate_rises_so_a_cold_start_leaves_no_stale_baseline() -> None:
    """A cache warming up (Parquet's row groups on 3.11): the consumer's thread delivers 810 a
    second cold, 1,510 warm, two workers 1,210 either way. The trial of the workers waits until
    the consumer's thread's rate has settled, and loses: tried against the cold phase, it would
    have won, and the consumer's thread would have waited 8 phases and more for a trial."""
    run = Run([0, 1, 2], 0, {0: 810, 1: 1010, 2: 1210}, memory_limit=1 << 62)
    run.outputs(phases(1, 810))  # a phase cold
    run.speed[0] = 1510  # warm from here on
    run.outputs(phases(1, 1510))
    assert set(run.levels) == {0}  # 1.9 times faster than the phase before: still rising, no trial
    run.outputs(phases(1, 1510))
    assert run.tuner.level == 2  # settled: the trial
    run.outputs(phases(10, 1510))
    assert run.tuner.chosen == 0  # two workers lost to the warm consumer's thread
    assert run.levels[-1] == 0


def test_a_rate_that_keeps_rising_delays_the_trial_a_phase_at_a_time() -> None:
    run = Run([0, 2], 2, {0: 1000, 2: 500}, memory_limit=1 << 62)
    run.outputs(phases(1, 500))  # the warm-up
    for speed in (500, 600, 700, 800, 900):  # each phase 10% faster than the one before, or more
        run.speed[2] = speed + 10
        run.outputs(phases(1, speed + 10))
    assert set(run.levels) == {2}
    run.outputs(phases(2, 910))  # as fast as the phase before: settled, the trial
    assert 0 in run.levels


def test_a_trial_clearly_losing_ends_after_a_quarter_phase() -> None:
    """Workers already running, tried again from level 0 at under half its rate: the trial
    ends once a quarter of a phase shows it; at 0.6 of the rate it runs its whole phase."""
    for speed, length in ((900, tuning.EARLY), (1400, 1.0)):
        run = Run([0, 2], 2, {2: 1000, 0: 2300})
        run.outputs(phases(FIRST_TRIAL, 1000) + phases(1, 2300))
        while run.tuner.level == 0:  # until the trial of the workers
            run.outputs(1)
        run.speed[2] = speed
        began = run.now
        while run.tuner.level == 2:
            run.outputs(1)
        assert run.tuner.chosen == 0
        assert length * PHASE <= run.now - began < length * PHASE + 2 * tuning.MIN_OUTPUTS / speed


def test_a_trial_that_starts_threads_runs_its_first_phase_whole_and_may_end_in_its_second() -> None:
    """A new thread may start late: the first phase of its trial is not cut short, however
    slow; a second phase still under half the rate left ends after a quarter of a phase."""
    run = Run([0, 1, 2], 1, {0: 4930, 1: 9930, 2: 9930}, memory_limit=1 << 62)
    run.outputs(phases(FIRST_TRIAL, 9930))
    assert run.tuner.level == 2  # trying a new worker
    run.speed[2] = 2930  # far slower while it starts
    run.outputs(phases(1, 2930) - 1)
    assert run.tuner.level == 2  # still on trial: a whole phase ...
    run.outputs(1)  # ... ended: its second phase begins
    began = run.now
    while run.tuner.level == 2:
        run.outputs(1)
    assert run.tuner.chosen == 1
    assert tuning.EARLY * PHASE <= run.now - began < tuning.EARLY * PHASE + 2 * tuning.MIN_OUTPUTS / 2930

"""The workers or the consumer's own thread run the chunks, as measured (`_executors/tuning`): which
one, and how often it changes, never changes an output, an error's place, a state or a shutdown.

Here the tuner is made to change level at every second output (see `restless`), far more often
than measuring ever would, and every contract pipeline is compared with the reference."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader._executors import tuning
from aioloader._program.steps import Step
from tests.conftest import repeated
from tests.support.reference import CASES, Case, assert_same_outputs, expected


@pytest.fixture
def restless(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuner that tries another level after every output and keeps it: the level changes every
    second output, the consumer's thread running every other stretch of jobs."""
    monkeypatch.setattr(tuning, "PHASE_SECONDS", 0.0)
    monkeypatch.setattr(tuning, "MIN_OUTPUTS", 1)
    monkeypatch.setattr(tuning, "FIRST_HOLD", 1)
    monkeypatch.setattr(tuning, "MARGIN", 0.0)  # every trial wins
    monkeypatch.setattr(tuning, "RISING", float("inf"))  # no rate rises enough to put off a trial
    monkeypatch.setattr(tuning, "WAITING", 0.0)
    monkeypatch.setattr(tuning, "PARALLEL", float("inf"))  # never sure that the threads pay off


def workers_ready(iterator: Any) -> None:
    """Wait until every worker of the iterator's engine has made its copy of the operations."""
    workers = iterator._cursor.holder.engine._workers
    deadline = time.monotonic() + 30
    while not workers.ready() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert workers.ready()


def consumer_ran_jobs(iterator: Any) -> bool:
    """True when the consumer's thread has run jobs past the first (which it runs whenever no
    worker is ready for it): its program's counters count the chunks it took."""
    engine = iterator._cursor.holder.engine
    if engine is None:
        return False
    chunks = engine.scheduler.program.meter.copy_steps().get((Step.KEYS, 0), (0, 0.0, 0))[2]
    return bool(chunks > 1)


# The out-of-order cases hold records back for a given count of workers: fixed counts only.
LEVELS = [(case, workers) for case in CASES for workers in (1, 2, "auto")]
LEVELS = [(case, w) for case, w in LEVELS if w != "auto" or not case.name.startswith("out-of-order")]


@repeated  # changing often, "auto" once retired its last worker (`test_worker_threads`)
@pytest.mark.usefixtures("restless")
@pytest.mark.parametrize(("case", "workers"), LEVELS, ids=[f"{c.name}-{w}" for c, w in LEVELS])
def test_changing_level_at_every_other_output_changes_no_output(
    case: Case, workers: int | str, repeat: int
) -> None:
    small = aioloader.ReadOptions(num_threads=2, prefetch_buffer_size=6)  # chunks of a few records
    outputs = list(case.loader(workers, read_options=small))  # type: ignore[arg-type]
    assert_same_outputs(outputs, expected(case))


@repeated
@pytest.mark.usefixtures("restless")
def test_the_consumers_thread_runs_jobs_and_resumes_exactly(repeat: int) -> None:
    # Long enough that the consumer's thread takes jobs before the end once the workers have
    # started (the first trial waits for them: on a loaded machine the second worker, which the
    # first one starts, once made its copy only after the first had done every chunk), and
    # however far ahead of it they ran before.
    case = dataclasses.replace(next(case for case in CASES if case.name == "fused-batch"), num_records=600)
    small = aioloader.ReadOptions(num_threads=2, prefetch_buffer_size=6)  # chunks of a batch
    head: list[Any] = []
    with iter(case.loader(2, read_options=small)) as iterator:
        head.append(next(iterator))  # the engine and its workers exist from here
        workers_ready(iterator)  # the window holds them back meanwhile: 6 records
        while not consumer_ran_jobs(iterator):
            head.append(next(iterator))
        head.append(next(iterator))
        state = iterator.get_state()
    with iter(case.loader(3)) as resumed:
        resumed.set_state(state)
        assert_same_outputs(head + list(resumed), expected(case))


class FailAt(aioloader.MapTransform):
    def __init__(self, bad: int) -> None:
        self.bad = bad

    def map(self, x: int) -> int:
        if x == self.bad:
            raise ValueError(f"bad record {x}")
        return x


@repeated
@pytest.mark.usefixtures("restless")
def test_an_error_in_a_job_the_consumer_ran_arrives_in_its_place(repeat: int) -> None:
    n = 3000
    sampler = aioloader.IndexSampler(n, shuffle=True, num_epochs=1, seed=1)
    bad = sampler[2000].record_key
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, n),
        sampler=sampler,
        operations=[FailAt(bad), aioloader.Batch(10)],
        worker_count=2,
    )
    got: list[Any] = []
    with iter(loader) as iterator, pytest.raises(ValueError, match=f"bad record {bad}") as raised:
        got.extend(iterator)
    assert len(got) == 200  # every batch before the failing record's
    assert f"index=2000, record_key={bad}" in "".join(getattr(raised.value, "__notes__", []))


class Counting:
    """A source that notes how many of its reads run at once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.now = self.most = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.0002)
        with self._lock:
            self.now -= 1
        return key


@repeated
@pytest.mark.usefixtures("restless")
@pytest.mark.parametrize("workers", [1, 2])
def test_no_more_threads_run_user_code_at_once_than_workers(workers: int, repeat: int) -> None:
    """When the consumer's thread takes over, it waits for the workers' jobs to end first."""
    source = Counting(2000)
    loader = aioloader.DataLoader(
        data_source=source,
        sampler=aioloader.IndexSampler(2000, num_epochs=1),
        operations=[aioloader.Batch(4)],
        worker_count=workers,
        read_options=aioloader.ReadOptions(num_threads=0, prefetch_buffer_size=24),
    )
    with iter(loader) as iterator:
        assert len(list(iterator)) == 500
    assert source.most <= workers


class Slow(aioloader.MapTransform):
    """Slow enough that a close comes while the consumer's thread is in a job."""

    def map(self, x: int) -> int:
        time.sleep(0.001)
        return x


def long_loader(transform: Any) -> aioloader.DataLoader:
    """100,000 records through `transform`, in batches of 4, on 2 workers."""
    return aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 100_000),
        sampler=aioloader.IndexSampler(100_000, num_epochs=1),
        operations=[transform, aioloader.Batch(4)],
        worker_count=2,
    )


@pytest.mark.usefixtures("restless")
def test_a_close_from_another_thread_stops_a_job_the_consumer_runs() -> None:
    with iter(long_loader(Slow())) as iterator:
        taken = 0
        while not consumer_ran_jobs(iterator):
            next(iterator)
            taken += 1
        closer = threading.Timer(0.05, iterator.close)
        closer.start()
        taken += sum(1 for _ in iterator)  # ends with StopIteration once closed
        closer.join()
        assert taken < 25_000  # stopped, not run to the end (100 s of records)
        assert not [t for t in threading.enumerate() if t.name.startswith("aioloader-worker")]


class Interrupt(aioloader.MapTransform):
    def map(self, x: int) -> int:
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt  # Ctrl-C, in a job run by the consumer's thread
        return x


@pytest.mark.usefixtures("restless")
def test_keyboard_interrupt_in_a_job_the_consumer_runs_stops_the_loader() -> None:
    with iter(long_loader(Interrupt())) as iterator:
        with pytest.raises(KeyboardInterrupt):
            list(iterator)
        assert not [t for t in threading.enumerate() if t.name.startswith("aioloader-worker")]


class Noise(aioloader.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> float:
        return x + float(rng.random())


def test_statistics_name_the_consumers_thread_when_it_was_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chosen, not under trial: the workers are always tried, and always lose."""
    monkeypatch.setattr(tuning, "PHASE_SECONDS", 0.0)
    monkeypatch.setattr(tuning, "MIN_OUTPUTS", 1)
    monkeypatch.setattr(tuning, "WAITING", 0.0)
    monkeypatch.setattr(tuning, "PARALLEL", float("inf"))

    def judge(self: tuning.Tuner, rate: float, losing: bool) -> None:  # the consumer's thread wins each trial
        self._trial = None
        if self.level != 0:
            self._set(0)

    monkeypatch.setattr(tuning.Tuner, "_judge", judge)
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 2000),
        sampler=aioloader.IndexSampler(2000, num_epochs=1, seed=2),
        operations=[Noise(), aioloader.Batch(4)],
        worker_count=2,
        read_options=aioloader.ReadOptions(prefetch_buffer_size=12),  # chunks of one batch
    )
    with iter(loader) as iterator:
        taken = 0
        while not iterator.statistics().inline:  # the first trial waits for the workers
            next(iterator)  # (StopIteration here: the consumer's thread was never chosen)
            taken += 1
        statistics = iterator.statistics()
        assert statistics.worker_count == 0
        assert "the consumer's thread runs the chunks" in statistics.summary()
        assert len(list(iterator)) == 500 - taken  # and on to the end


class ColdBlocks:
    """A source whose first read of each block of 40 keys is slow, as a cache warming up (Parquet's
    row groups): the consumer's thread runs slow at first, and the tuner's first phases with it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._warm: set[int] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        with self._lock:
            cold = key // 40 not in self._warm
            self._warm.add(key // 40)
        if cold:
            time.sleep(0.002)  # the GIL released, as while a row group is decoded
        return key


@repeated
def test_auto_after_a_cold_start_delivers_the_batches_of_worker_count_0(
    monkeypatch: pytest.MonkeyPatch, repeat: int
) -> None:
    """Whatever the tuner makes of a cold start (`tuning._settled`): short phases, so that it
    measures and tries levels many times in this short run."""
    monkeypatch.setattr(tuning, "PHASE_SECONDS", 0.002)
    monkeypatch.setattr(tuning, "FIRST_HOLD", 2)

    def batches(workers: int | str) -> list[Any]:
        loader = aioloader.DataLoader(
            data_source=ColdBlocks(4000),
            sampler=aioloader.IndexSampler(4000, shuffle=True, num_epochs=1, seed=3),
            operations=[Noise(), aioloader.Batch(8)],
            worker_count=workers,
        )
        return list(loader)

    assert_same_outputs(batches("auto"), batches(0))

"""`iterator.statistics()`: counts that add up, bounds never exceeded, a report that names the
stage made slow on purpose, and snapshots read from another thread while the loader runs."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import aioloader
from aioloader import LoaderStatistics
from tests.conftest import repeated

N = 400
REPO = Path(__file__).resolve().parent.parent


class Plus(aioloader.MapTransform):
    def map(self, x: int) -> int:
        return x + 1


class SlowPlus(aioloader.MapTransform):
    def map(self, x: int) -> int:
        time.sleep(0.002)
        return x + 1


class Even(aioloader.FilterTransform):
    def filter(self, x: int) -> bool:
        return x % 2 == 0


class Twice(aioloader.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x: int) -> list[int]:
        return [x, x]


class SlowSource:
    """Reads that wait (as a network disk's do)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, key: int) -> int:
        time.sleep(0.002)
        return key


def loader(operations: list[Any], workers: int, source: Any = None, **kwargs: Any) -> aioloader.DataLoader:
    return aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, N, 1) if source is None else source,
        sampler=aioloader.IndexSampler(N, shuffle=True, num_epochs=1, seed=3),
        operations=operations,
        worker_count=workers,
        **kwargs,
    )


def items(statistics: LoaderStatistics) -> dict[str, int]:
    return {stage.name: stage.items for stage in statistics.stages}


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_counts_add_up_records_in_equal_records_out_plus_filtered(workers: int) -> None:
    iterator = iter(loader([Plus(), Even(), Twice(), aioloader.Batch(7)], workers))
    batches = list(iterator)
    found = items(iterator.statistics())
    kept = sum(1 for x in range(N) if (x + 1) % 2 == 0)
    assert found["sampling"] == found["read"] == found["operations[0] (Plus.map)"] == N
    # The filter's records in are its records out plus those it dropped.
    assert found["operations[1] (Even.filter)"] == kept
    assert found["operations[2] (Twice.flat_map)"] == 2 * kept
    assert found["batch"] == found["consumer"] == len(batches) == -(-2 * kept // 7)
    assert sum(len(batch) for batch in batches) == 2 * kept


class Keys:
    """Record `k` is `k`, read one key at a time (no `__getitems__`)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, key: int) -> int:
        return key


class FailOn(aioloader.MapTransform):
    def __init__(self, bad: int) -> None:
        self.bad = bad

    def map(self, x: int) -> int:
        if x == self.bad:
            raise ValueError(x)
        return x


def test_counts_add_up_when_a_map_fails_in_the_middle_of_a_chunk() -> None:
    """The read and the maps run record by record: the failing record was read and went
    through the maps before the failing one, and not through it."""
    source = Keys()  # read key by key, in the loop
    iterator = iter(loader([Plus(), FailOn(300), Plus(), aioloader.Batch(5)], 0, source=source))
    with pytest.raises(ValueError, match="300"):
        list(iterator)
    found = items(iterator.statistics())
    assert found["read"] == found["operations[0] (Plus.map)"] == found["operations[1] (FailOn.map)"] + 1
    assert found["operations[1] (FailOn.map)"] == found["operations[2] (Plus.map)"]
    assert found["batch"] * 5 <= found["operations[2] (Plus.map)"] < (found["batch"] + 1) * 5


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_async_iterator_counts_the_same(workers: int) -> None:
    iterator = aloader = loader([Plus(), Even(), aioloader.Batch(8)], workers).__aiter__()
    delivered = [batch async for batch in aloader]
    found = items(iterator.statistics())
    assert found["read"] == N
    assert found["operations[1] (Even.filter)"] == N // 2
    assert found["batch"] == found["consumer"] == len(delivered) == N // 2 // 8


def test_before_the_first_output_only_the_consumer_is_there() -> None:
    statistics = iter(loader([Plus()], 2)).statistics()
    assert [stage.name for stage in statistics.stages] == ["consumer"]
    assert statistics.stage("consumer").items == 0
    with pytest.raises(KeyError, match="no stage named 'read'; there are \\['consumer'\\]"):
        statistics.stage("read")


@repeated
@pytest.mark.parametrize("workers", [1, 3])
def test_bounds_are_never_exceeded_and_figures_only_grow(workers: int, repeat: int) -> None:
    options = aioloader.ReadOptions(prefetch_buffer_size=24)
    previous: dict[str, int] = {}
    # `with`: a failed assertion still closes the iterator (its workers would outlive the test).
    with iter(loader([Plus(), aioloader.Batch(4)], workers, read_options=options)) as iterator:
        for _ in iterator:
            statistics = iterator.statistics()
            for buffer in statistics.buffers:
                assert 0 <= buffer.in_use <= buffer.peak <= buffer.capacity, buffer
            found = items(statistics)
            assert all(found[name] >= count for name, count in previous.items())
            previous = found
            # The tuner may run the chunks on the consumer's thread where that measures
            # faster (trivial records on a loaded machine): then it reports 0 workers, inline.
            assert statistics.worker_count in (0, workers)
            assert statistics.inline == (statistics.worker_count == 0)
            # Workers start one another: the first outputs may come before the last one runs.
            assert statistics.thread("workers").count <= workers
        assert previous["read"] == N
    # The figures kept at the end count the workers that had started by then: on a loaded
    # machine the chain's last one may not have (2 of 3 once, 3.13t in CI, under load).
    assert 1 <= iterator.statistics().thread("workers").count <= workers


@repeated
def test_statistics_from_another_thread_while_the_loader_runs(repeat: int) -> None:
    iterator = iter(loader([Plus(), Even(), aioloader.Batch(4)], 3))
    snapshots: list[LoaderStatistics] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def watch() -> None:
        try:
            while not done.is_set():
                snapshots.append(iterator.statistics())
        except BaseException as error:
            errors.append(error)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        total = sum(len(batch) for batch in iterator)
    finally:
        done.set()
        watcher.join()
    assert not errors
    assert total == N // 2
    reads = [items(s).get("read", 0) for s in snapshots]
    assert reads == sorted(reads)
    assert reads[-1] <= N


def test_the_report_names_a_slow_operation() -> None:
    statistics = _drain(loader([Plus(), SlowPlus(), aioloader.Batch(8)], 2))
    stage, advice = _verdict(statistics)
    assert stage == "operations[1] (SlowPlus.map)"
    assert "raise `worker_count` (now 2)" in advice


def test_the_report_names_slow_reads() -> None:
    statistics = _drain(loader([Plus(), aioloader.Batch(8)], 2, source=SlowSource()))
    stage, advice = _verdict(statistics)
    assert stage == "read"
    assert "reads wait: raise `ReadOptions.num_threads`" in advice


def test_the_report_names_a_slow_operation_without_workers() -> None:
    stage, advice = _verdict(_drain(loader([SlowPlus(), Even(), aioloader.Batch(8)], 0)))
    assert stage == "operations[0] (SlowPlus.map)"
    assert "`worker_count` > 0" in advice


def test_the_report_names_a_slow_consumer() -> None:
    iterator = iter(loader([Plus(), aioloader.Batch(4)], 2))
    for _ in iterator:
        time.sleep(0.01)  # the training step: far slower than the loader
    statistics = iterator.statistics()
    assert statistics.consumer_wait_share < 0.1
    assert _verdict(statistics)[0] == "consumer"
    assert "the consumer is the bottleneck" in statistics.summary()


def test_the_device_stage_is_counted() -> None:
    pytest.importorskip("jax")
    device_put = aioloader.DevicePut(buffer_size=2)
    iterator = iter(loader([Plus(), aioloader.Batch(16)], 2, device_put=device_put))
    previous = 0
    for _ in iterator:
        statistics = iterator.statistics()
        device = statistics.buffer("device buffer")
        assert device.in_use <= device.peak <= device.capacity == 2
        assert statistics.stage("device_put").items >= previous
        previous = statistics.stage("device_put").items
    statistics = iterator.statistics()
    assert statistics.stage("device_put").items == statistics.stage("batch").items == N // 16
    assert statistics.thread("device").count == 1


@pytest.mark.parametrize("asynchronous", [False, True], ids=["for", "async for"])
def test_the_device_stage_is_counted_at_worker_count_0_too(asynchronous: bool) -> None:
    # There the consumer's thread transfers: the stage was missing, and a slow transfer was
    # blamed on another stage.
    pytest.importorskip("jax")
    built = loader([Plus(), aioloader.Batch(16)], 0, device_put=aioloader.DevicePut(buffer_size=2))
    if asynchronous:

        async def run() -> aioloader.LoaderStatistics:
            iterator = aiter(built)
            assert len([b async for b in iterator]) == N // 16
            return iterator.statistics()

        statistics = asyncio.run(run())
    else:
        iterator = iter(built)
        assert len(list(iterator)) == N // 16
        statistics = iterator.statistics()
    assert statistics.stage("device_put").items == statistics.stage("batch").items == N // 16
    assert statistics.stage("device_put").busy_seconds > 0


def test_log_statistics_logs_the_summary_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    aioloader.log_statistics(1e-9)
    try:
        with caplog.at_level(logging.DEBUG, logger="aioloader.statistics"):
            # A slow map, so the consumer waits for each of the 10 batches (a log is
            # written when it waits): with a fast one it may find most of them ready.
            list(loader([SlowPlus(), aioloader.Batch(40)], 1))
    finally:
        aioloader.log_statistics(None)
    summaries = [r.getMessage() for r in caplog.records if r.name == "aioloader.statistics"]
    assert len(summaries) >= 5
    assert all("bottleneck:" in s for s in summaries)
    caplog.clear()
    list(loader([Plus(), aioloader.Batch(40)], 1))
    assert not caplog.records


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "`every_seconds` must be a finite number greater than 0, got 0."),
        (float("inf"), ValueError, "got inf"),
        ("10", TypeError, "`every_seconds` must be a number or None, got '10' of type str."),
        (True, TypeError, "got True of type bool"),
    ],
)
def test_log_statistics_rejects_bad_intervals(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message.replace("(", "\\(").replace(".", "\\.")):
        aioloader.log_statistics(value)


def test_statistics_can_be_switched_off_for_measuring_their_cost() -> None:
    code = (
        "import aioloader\n"
        "it = iter(aioloader.DataLoader(data_source=aioloader.RangeDataSource(0, 50, 1),"
        " sampler=aioloader.IndexSampler(50, shuffle=False, num_epochs=1), worker_count=2))\n"
        "assert len(list(it)) == 50\n"
        "print([(s.name, s.items) for s in it.statistics().stages])\n"
    )
    environment = {**os.environ, "AIOLOADER_STATISTICS": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('sampling', 0), ('read', 0), ('consumer', 50)]"


def _drain(dataloader: aioloader.DataLoader) -> LoaderStatistics:
    iterator = iter(dataloader)
    for _ in iterator:
        pass
    return iterator.statistics()


def _verdict(statistics: LoaderStatistics) -> tuple[str, str]:
    from aioloader._observability.report import bottleneck

    return bottleneck(statistics)


def test_after_set_state_the_figures_count_from_the_resumed_position() -> None:
    iterator = iter(loader([Plus(), aioloader.Batch(8)], 2))
    for _ in range(10):
        next(iterator)
    state = iterator.get_state()
    iterator.set_state(state)
    rest = list(iterator)
    found = items(iterator.statistics())
    assert found["read"] == N - 80
    assert found["consumer"] == len(rest) == (N - 80) // 8


def test_statistics_after_close_from_another_thread_keep_the_last_figures() -> None:
    iterator = iter(loader([Plus(), aioloader.Batch(8)], 2))
    for _ in range(5):
        next(iterator)
    closer = threading.Thread(target=iterator.close)
    closer.start()
    closer.join()
    statistics = iterator.statistics()
    assert statistics.stage("consumer").items >= 5
    assert statistics.stage("read").items >= 40
    assert statistics.elapsed_seconds == iterator.statistics().elapsed_seconds  # frozen at the end


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["for", "async for"])
def test_a_dataset_iterator_gives_each_parallel_parts_figures(workers: int, asynchronous: bool) -> None:
    # Two parts mixed: each is a DataLoader on the same engine, with its own figures,
    # and what they delivered adds up to what the mix gave.
    parts = [
        aioloader.MapDataset.range(base, base + 40).to_iter_dataset().map(lambda x: x + 1).batch(4)
        for base in (0, 1000)
    ]
    dataset = aioloader.IterDataset.mix(parts, [1, 1]).prefetch(workers)
    if asynchronous:

        async def run() -> tuple[int, list[aioloader.LoaderStatistics]]:
            iterator = aiter(dataset)
            taken = [batch async for batch in iterator]
            return len(taken), iterator.statistics()

        delivered, figures = asyncio.run(run())
    else:
        iterator = iter(dataset)
        delivered, figures = len(list(iterator)), iterator.statistics()
    assert len(figures) == 2
    assert [items(part)["read"] for part in figures] == [40, 40]
    assert sum(items(part)["consumer"] for part in figures) == delivered == 20


@pytest.mark.parametrize("value", ["10s", "0", "-1", "nan", "inf"])
def test_a_bad_log_interval_in_the_environment_is_named(value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import aioloader"],
        env={**os.environ, "AIOLOADER_LOG_STATISTICS": value, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    wanted = "AIOLOADER_LOG_STATISTICS must be a number of seconds greater than 0 (how often to log"
    assert f"{wanted} the statistics), got {value!r}" in done.stderr


def test_a_good_log_interval_in_the_environment_is_taken() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from aioloader._observability import logs; print(logs.interval)"],
        env={**os.environ, "AIOLOADER_LOG_STATISTICS": "2.5", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "2.5", done.stderr


@pytest.mark.parametrize(
    ("inline", "workers", "threads"), [(True, 0, 16), (False, 2, 16), (False, 0, 16), (False, 0, 0)]
)
def test_slow_reads_get_the_read_threads_advice_where_threads_run_chunks(
    inline: bool, workers: int, threads: int
) -> None:
    # With the consumer's thread chosen to run the chunks, slow reads still go to the read
    # threads: the advice once spoke of hand-offs and subinterpreters instead. At
    # `worker_count=0` the read threads engage once reads wait (none: the reads are work).
    stages = [
        aioloader.StageStatistics("read", 100, 10.0, 9.0, 1),
        aioloader.StageStatistics("operations[0] (Plus.map)", 100, 10.0, 0.1, 1),
        aioloader.StageStatistics("consumer", 100, 10.0, 0.1, 100),
    ]
    consumer = aioloader.ThreadStatistics("consumer", 1, 0.2, 9.5, 0.0)
    statistics = LoaderStatistics(10.0, stages, [consumer], [], workers, threads, inline)
    stage, advice = _verdict(statistics)
    assert stage == "read"
    if threads:
        assert "reads wait: raise `ReadOptions.num_threads` (now 16)" in advice
    else:
        assert advice.endswith("read takes the most time: run it on worker threads (`worker_count` > 0)")


class SlowKeys:
    """A source of 12 records, 20 ms each."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, key: int) -> int:
        time.sleep(0.02)
        return key


@repeated
def test_figures_from_another_thread_never_go_down_while_the_consumer_waits(repeat: int) -> None:
    # The consumer's busy time was the time since the start less the waits that had ended:
    # it grew during each wait and dropped after it, a Prometheus counter going down.
    loader_of_slow = aioloader.DataLoader(
        data_source=SlowKeys(),
        sampler=aioloader.IndexSampler(12, num_epochs=1),
        operations=[aioloader.Batch(6)],
        worker_count=1,
        read_options=aioloader.ReadOptions(num_threads=0, prefetch_buffer_size=6),
    )
    iterator = iter(loader_of_slow)
    snapshots = [iterator.statistics()]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            snapshots.append(iterator.statistics())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.02)  # before the first next(): no time counts yet
    try:
        assert len(list(iterator)) == 2  # the consumer does nothing but wait
    finally:
        done.set()
        watcher.join()
    snapshots.append(iterator.statistics())
    for before, after in itertools.pairwise(snapshots):
        assert after.elapsed_seconds >= before.elapsed_seconds
        for figure in ("busy_seconds", "waiting_for_input_seconds"):
            assert getattr(after.thread("consumer"), figure) >= getattr(before.thread("consumer"), figure)
    assert all(s.thread("consumer").busy_seconds < 0.05 for s in snapshots)
    assert snapshots[-1].consumer_wait_share > 0.8


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_making_the_engine_is_time_the_consumer_waits(
    monkeypatch: pytest.MonkeyPatch, workers: int, asynchronous: bool
) -> None:
    # Making the engine (lazy imports, starting threads) was the consumer's busy time: 1.1 s
    # of it on a loaded machine (3.13t, CI), in a test whose consumer does nothing but wait.
    from aioloader._iteration import iterators

    def slowly(make: Any) -> Any:
        def made(*args: Any) -> Any:
            time.sleep(0.2)
            return make(*args)

        return made

    monkeypatch.setattr(iterators, "sync_engine", slowly(iterators.sync_engine))
    monkeypatch.setattr(iterators, "async_engine", slowly(iterators.async_engine))
    slow_start = loader([aioloader.Batch(100)], workers)  # few outputs: few gaps of the consumer's own

    async def drain() -> aioloader.LoaderStatistics:
        iterator = slow_start.__aiter__()
        assert len([batch async for batch in iterator]) == N // 100
        return iterator.statistics()

    if asynchronous:
        statistics = asyncio.run(drain())
    else:
        iterator = iter(slow_start)
        assert len(list(iterator)) == N // 100
        statistics = iterator.statistics()
    consumer = statistics.thread("consumer")
    assert consumer.waiting_for_input_seconds >= 0.2
    assert consumer.busy_seconds < 0.1
    assert statistics.elapsed_seconds >= 0.2


@pytest.mark.parametrize("workers", [0, 2])
def test_the_final_figures_never_fall_below_a_snapshot_taken_as_the_engine_stopped(workers: int) -> None:
    # A snapshot from another thread read the clock just after the consumer kept its final
    # figures (the engine still in the holder): the next snapshot showed 2 us less elapsed
    # time (3.13t, once in a CI run). Here the final figures are kept "before" a live one.
    built = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 8, 1),
        sampler=aioloader.IndexSampler(8, num_epochs=1),
        operations=[aioloader.Batch(4)],
        worker_count=workers,
    )
    iterator = iter(built)
    next(iterator)
    live = iterator.statistics()
    assert len(list(iterator)) == 1
    cursor = iterator._cursor
    assert cursor.final is not None
    cursor.final = (cursor.final[0], cursor.since + live.elapsed_seconds / 2)  # kept earlier
    final = iterator.statistics()
    assert final.elapsed_seconds >= live.elapsed_seconds
    waited = final.thread("consumer").waiting_for_input_seconds
    assert waited >= live.thread("consumer").waiting_for_input_seconds


@pytest.mark.parametrize("workers", [0, 2])
def test_no_snapshot_shows_a_stage_ahead_of_the_one_before_it(workers: int) -> None:
    # Copied upstream first while the owner counted on, a snapshot once showed a 1:1 map
    # with more items than the read before it (seen on 3.13t, a few times a run).
    n = 100_000
    built = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, n, 1),
        sampler=aioloader.IndexSampler(n, num_epochs=1),
        operations=[Plus(), Even(), Plus(), aioloader.Batch(10)],
        worker_count=workers,
    )
    iterator = iter(built)
    order = ["sampling", "read", "operations[0] (Plus.map)"]
    ahead: list[dict[str, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            items = {s.name: s.items for s in iterator.statistics().stages}
            chain = [items.get(name, 0) for name in order]
            after_filter = (
                items.get("operations[1] (Even.filter)", 0),
                items.get("operations[2] (Plus.map)", 0),
            )
            if chain != sorted(chain, reverse=True) or after_filter[1] > after_filter[0]:
                ahead.append(items)

    watchers = [threading.Thread(target=watch) for _ in range(2)]
    for watcher in watchers:
        watcher.start()
    try:
        assert sum(len(batch) for batch in iterator) == n // 2
    finally:
        done.set()
        for watcher in watchers:
            watcher.join()
    assert ahead == []

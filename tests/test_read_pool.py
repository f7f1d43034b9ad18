"""`ReadOptions.num_threads` reads in flight from a slow random-access source."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from aioloader import (
    Batch,
    DataLoader,
    IndexSampler,
    MapDataset,
    MultiprocessingOptions,
    ReadOptions,
    RecordMetadata,
)
from aioloader._program import read_pool
from tests.conftest import aioloader_threads, repeated, wait_for_no_threads
from tests.support.outputs import drain, notes
from tests.support.thread_starts import note_thread_starts


class VirtualClock:
    """Each thread's own time, moved on by the reads it makes: what the pool measures
    is what the source says a read took, whatever the machine's load."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> float:
        return getattr(self._local, "now", 0.0)

    def advance(self, seconds: float) -> None:
        self._local.now = self() + seconds


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    virtual = VirtualClock()
    monkeypatch.setattr(read_pool, "CLOCK", virtual)
    return virtual


class SlowSource:
    """Each read takes 1 ms (a network disk): it waits that long, and says so to the clock;
    counts the reads in flight."""

    def __init__(self, size: int, clock: VirtualClock) -> None:
        self.size, self.clock = size, clock
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.001)  # really waits, so that reads overlap when several are in flight
        self.clock.advance(0.001)
        with self.lock:
            self.in_flight -= 1
        return key * 2


def loader(source: SlowSource, workers: int, threads: int, buffer: int = 500) -> DataLoader:
    return DataLoader(
        data_source=source,
        sampler=IndexSampler(source.size, shuffle=True, seed=4, num_epochs=1),
        worker_count=workers,
        read_options=ReadOptions(num_threads=threads, prefetch_buffer_size=buffer),
    )


def assert_no_read_threads(source: SlowSource) -> None:
    """Read every record, checking for read threads while the iterator still runs."""
    with iter(loader(source, 2, 8)) as iterator:
        for count, _ in enumerate(iterator, 1):
            if count == source.size - 1:
                assert not any(t.name.startswith("aioloader-read") for t in aioloader_threads())
    assert count == source.size


@repeated
@pytest.mark.parametrize(("workers", "threads"), [(1, 8), (2, 6)])
def test_slow_reads_go_to_num_threads_threads_in_order(
    workers: int, threads: int, repeat: int, clock: VirtualClock
) -> None:
    source = SlowSource(400, clock)
    keys = IndexSampler(400, shuffle=True, seed=4, num_epochs=1).record_keys(0, 400)
    assert list(loader(source, workers, threads)) == [key * 2 for key in keys]
    assert workers < source.most_in_flight <= threads


class VerySlowSource(SlowSource):
    """Reads of 20 ms, twice the wall time a chunk is meant to take (an object store)."""

    def __getitem__(self, key: int) -> int:
        time.sleep(0.019)
        self.clock.advance(0.019)
        return super().__getitem__(key)


@pytest.mark.parametrize("dataset", [False, True])
def test_reads_slower_than_a_chunk_still_go_num_threads_at_once(dataset: bool, clock: VirtualClock) -> None:
    # Chunks were cut to 10 ms of wall time, so one 20 ms read a chunk: the pool read one
    # record at a time for each worker (as slow as no pool at all, 13x slower than Grain).
    source = VerySlowSource(64, clock)
    keys = list(range(64))
    if dataset:
        # `MapDataset._getitems` loops over `ds[i]`: its reads go to the pool one by one.
        pipeline = MapDataset.source(source).map(lambda x: x + 1).to_iter_dataset(ReadOptions(num_threads=8))
        got = list(pipeline.mp_prefetch(MultiprocessingOptions(num_workers=1)))
        assert got == [key * 2 + 1 for key in keys]
    else:
        sampler = IndexSampler(64, num_epochs=1)
        options = ReadOptions(num_threads=8)
        got = list(DataLoader(data_source=source, sampler=sampler, worker_count=1, read_options=options))
        assert got == [key * 2 for key in keys]
    assert source.most_in_flight >= 4  # 8 unless the machine is very busy; 1 before


class Threads(VerySlowSource):
    """Notes the threads that read."""

    def __init__(self, size: int, clock: VirtualClock) -> None:
        super().__init__(size, clock)
        self.readers: set[str] = set()

    def __getitem__(self, key: int) -> int:
        self.readers.add(threading.current_thread().name)
        return super().__getitem__(key)


@pytest.mark.parametrize(
    "options", [ReadOptions(num_threads=8), ReadOptions(num_threads=0), ReadOptions(prefetch_buffer_size=0)]
)
def test_to_iter_dataset_reads_a_slow_source_on_num_threads_threads_as_grain_does(
    options: ReadOptions, clock: VirtualClock
) -> None:
    # Grain's `to_iter_dataset(read_options)` reads on threads; here the part ran in the
    # caller's thread (the DataLoader's debug mode), one 50 ms read after another: 12x slower.
    source = Threads(48, clock)
    mapped_in: set[str] = set()

    def tag(x: int) -> int:
        mapped_in.add(threading.current_thread().name)
        return x + 1

    iterator = iter(MapDataset.source(source).to_iter_dataset(options).map(tag))
    assert list(iterator) == [key * 2 + 1 for key in range(48)]
    assert mapped_in == {threading.current_thread().name}  # after the part: the caller's thread
    if options.reads_ahead:
        assert source.most_in_flight >= 4  # 8 unless the machine is very busy
        assert any(name.startswith("aioloader-read") for name in source.readers)
    else:  # Grain's "no read threads" / "no read-ahead": the caller reads, one at a time
        assert source.most_in_flight == 1
        assert source.readers == {threading.current_thread().name}
    assert wait_for_no_threads() == []


def test_to_iter_dataset_left_early_joins_its_read_threads(clock: VirtualClock) -> None:
    source = VerySlowSource(64, clock)
    with iter(MapDataset.source(source).to_iter_dataset(ReadOptions(num_threads=8))) as iterator:
        assert [next(iterator) for _ in range(20)] == [key * 2 for key in range(20)]
        assert [s.read_threads for s in iterator.statistics()] == [8]
    assert wait_for_no_threads() == []


@pytest.mark.parametrize(
    "options", [ReadOptions(num_threads=8), ReadOptions(num_threads=0), ReadOptions(prefetch_buffer_size=0)]
)
def test_worker_count_0_reads_a_slow_source_on_num_threads_threads_as_grain_does(
    options: ReadOptions, clock: VirtualClock
) -> None:
    # Grain's DataLoader reads through `to_iter_dataset(read_options)` at any worker count:
    # at 0 its read threads read ahead. Here the caller's thread read one 20 ms read after
    # another (a blocking 2 ms source: 471 records/s, Grain 4,842). The maps still run in
    # the caller's thread, and `num_threads=0` reads there too, as Grain's does.
    keys = IndexSampler(48, shuffle=True, seed=4, num_epochs=1).record_keys(0, 48)
    source = Threads(48, clock)
    mapped_in: set[str] = set()

    def tag(x: int) -> int:
        mapped_in.add(threading.current_thread().name)
        return x + 1

    sampler = IndexSampler(48, shuffle=True, seed=4, num_epochs=1)
    pipeline = DataLoader(data_source=source, sampler=sampler, operations=[tag], read_options=options)
    with iter(pipeline) as iterator:
        assert list(iterator) == [key * 2 + 1 for key in keys]
        threads = iterator.statistics().read_threads
    assert mapped_in == {threading.current_thread().name}
    if options.reads_ahead:
        assert source.most_in_flight >= 4  # 8 unless the machine is very busy
        assert any(name.startswith("aioloader-read") for name in source.readers)
        assert threads == 8
    else:
        assert source.most_in_flight == 1
        assert source.readers == {threading.current_thread().name}
        assert threads == 0
    assert wait_for_no_threads() == []


class Paced(SlowSource):
    """Notes how far its reads run ahead of what the consumer took, and the reads done while
    the consumer was between two `next()` calls (working on a step, say)."""

    def __init__(self, size: int, clock: VirtualClock) -> None:
        super().__init__(size, clock)
        self.taken = self.done = self.most_ahead = self.between = 0
        self.in_next = False

    def __getitem__(self, key: int) -> int:
        value = super().__getitem__(key)
        with self.lock:
            self.done += 1
            self.most_ahead = max(self.most_ahead, self.done - self.taken)
            self.between += not self.in_next
        return value

    def take_all(self, iterator: Any, step_seconds: float) -> list[int]:
        got = []
        while True:
            with self.lock:
                self.in_next = True
            try:
                got.append(next(iterator))
            except StopIteration:
                return got
            with self.lock:
                self.in_next = False
                self.taken = len(got)
            time.sleep(step_seconds)  # the consumer's own work (a training step)


@pytest.mark.parametrize("buffer", [16, 64])
def test_worker_count_0_reads_the_next_chunk_while_the_consumer_works(
    buffer: int, clock: VirtualClock
) -> None:
    # Grain's read threads read ahead of its `worker_count=0` loop while the caller trains;
    # here a chunk's reads waited for the `next()` that needed them, every time: reads
    # never overlapped the consumer's own work.
    source = Paced(160, clock)
    with iter(loader(source, 0, 8, buffer)) as iterator:
        got = source.take_all(iterator, 0.003)
    assert got == [
        key * 2 for key in IndexSampler(160, shuffle=True, seed=4, num_epochs=1).record_keys(0, 160)
    ]
    assert source.between > 0  # reads done while the consumer worked: 0 without reading ahead
    assert source.done == 160  # each record read once: the chunk read ahead is the one taken
    assert source.most_ahead <= buffer  # the bound: records read and not yet taken
    assert source.most_in_flight <= 8
    assert wait_for_no_threads() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_taken_while_the_next_chunk_is_read_ahead_resumes_exactly(
    workers: int, clock: VirtualClock
) -> None:
    # The reads ahead are not part of the position: the state counts what `next()` gave.
    keys = IndexSampler(160, shuffle=True, seed=4, num_epochs=1).record_keys(0, 160)
    paced = Paced(160, clock)
    with iter(loader(paced, 0, 8)) as first:
        got = [next(first) for _ in range(50)]
        time.sleep(0.01)  # the next chunk's reads run meanwhile
        state = first.get_state()
    assert paced.done > 50  # read past what next() gave: the chunk's rest, the next chunk's reads
    with iter(loader(Paced(160, clock), workers, 8)) as resumed:
        resumed.set_state(state)
        assert got + list(resumed) == [key * 2 for key in keys]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_from_a_read_ahead_reaches_the_consumer_after_the_outputs_before_it(
    interrupt: type[BaseException], clock: VirtualClock
) -> None:
    keys = IndexSampler(160, shuffle=True, seed=4, num_epochs=1).record_keys(0, 160)

    class Interrupting(SlowSource):
        def __getitem__(self, key: int) -> int:
            if key == keys[120]:
                raise interrupt("stop")
            return super().__getitem__(key)

    iterator = iter(loader(Interrupting(160, clock), 0, 8))
    got, error = drain(iterator, interrupt)  # the chunk with key 120 is read ahead of the one before
    assert isinstance(error, interrupt)
    assert got == [key * 2 for key in keys[: len(got)]]
    assert len(got) <= 120
    assert wait_for_no_threads() == []
    with pytest.raises(StopIteration):  # closed by the interrupt, as with any engine
        next(iterator)


class ExitingSampler:
    """A sampler of its own (any `__getitem__` giving `RecordMetadata`): index `stop` raises
    `error`, which `Walk` leaves to the caller."""

    def __init__(self, size: int, stop: int, error: type[BaseException]) -> None:
        self.size, self.stop, self.error = size, stop, error

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> RecordMetadata:
        if index >= self.size:
            raise IndexError(index)
        if index == self.stop:
            raise self.error(f"stop at {index}")
        return RecordMetadata(index=index, record_key=index, rng=None)


@pytest.mark.parametrize("threads", [0, 8])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_a_samplers_interrupt_stops_the_loader_and_the_state_resumes_right_after_the_outputs_given(
    threads: int, interrupt: type[BaseException], clock: VirtualClock
) -> None:
    # With read threads, the next chunk is walked while the outputs of the one before are
    # still to be handed out: an interrupt from the sampler then comes at once, before
    # them, as a transform's does (README, "Errors"); the state counts what `next()` gave.
    def loader_with(sampler: ExitingSampler) -> DataLoader:
        return DataLoader(
            data_source=SlowSource(200, clock),
            sampler=sampler,
            operations=[Batch(4)],
            worker_count=0,
            read_options=ReadOptions(num_threads=threads, prefetch_buffer_size=32),
        )

    iterator = iter(loader_with(ExitingSampler(200, 60, interrupt)))
    got, error = drain(iterator, interrupt)
    assert isinstance(error, interrupt)
    records = [x for batch in got for x in batch.tolist()]
    assert records == [key * 2 for key in range(len(records))]
    assert len(records) <= 60
    state = iterator.get_state()
    assert wait_for_no_threads() == []
    with iter(loader_with(ExitingSampler(200, -1, interrupt))) as resumed:
        resumed.set_state(state)
        rest = [x for batch in resumed for x in batch.tolist()]
    assert records + rest == [key * 2 for key in range(200)]


def test_start_prefetch_of_a_fast_source_leaves_no_read_thread_after_the_first_next() -> None:
    # The early read's threads idled until the iterator closed: a Ctrl-C during the training
    # step (the iterator kept alive by the traceback) left them running.
    fast = DataLoader(data_source=list(range(100)), sampler=IndexSampler(100, num_epochs=1), worker_count=0)
    with iter(fast) as iterator:
        iterator.start_prefetch()
        assert next(iterator) == 0
        assert wait_for_no_threads() == []  # at 0 workers over a fast source, no thread at all
        assert list(iterator) == list(range(1, 100))


def test_worker_count_0_reads_a_fast_source_in_the_callers_thread(
    clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source whose reads do not wait is read where the chunk runs: no read thread starts."""
    starts = note_thread_starts(monkeypatch)

    class Fast(SlowSource):
        def __getitem__(self, key: int) -> int:
            assert threading.current_thread() is threading.main_thread()
            self.clock.advance(1e-6)
            return key * 2

    keys = IndexSampler(3000, shuffle=True, seed=4, num_epochs=1).record_keys(0, 3000)
    with iter(loader(Fast(3000, clock), 0, 8)) as iterator:
        assert list(iterator) == [key * 2 for key in keys]
        assert iterator.statistics().read_threads == 0
    assert starts == []


def test_read_threads_are_joined_on_close(clock: VirtualClock) -> None:
    source = SlowSource(10_000, clock)
    with iter(loader(source, 2, 8)) as iterator:
        for _ in range(200):
            next(iterator)
        assert any(t.name.startswith("aioloader-read") for t in aioloader_threads())
    assert aioloader_threads() == []


def test_fast_reads_stay_on_the_workers(clock: VirtualClock) -> None:
    class Fast(SlowSource):
        def __getitem__(self, key: int) -> int:
            self.clock.advance(1e-6)
            return key * 2

    assert_no_read_threads(Fast(5000, clock))


def test_now_and_then_a_slow_read_stays_on_the_workers(clock: VirtualClock) -> None:
    """A worker that waits for the GIL or a core now and then has a few slow reads
    among fast ones: that is no reason to move cheap reads to the pool."""

    class Hiccups(SlowSource):
        def __init__(self, size: int, clock: VirtualClock) -> None:
            super().__init__(size, clock)
            self.reads = 0

        def __getitem__(self, key: int) -> int:
            with self.lock:
                self.reads += 1
                hiccup = self.reads % 3 == 1  # the very first read too
            self.clock.advance(0.002 if hiccup else 1e-6)
            return key * 2

    assert_no_read_threads(Hiccups(3000, clock))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "bad", [0, 2, 5, 300]
)  # among the first reads of a chunk, timed one by one, or after
def test_a_failing_slow_read_is_reported_at_its_place(bad: int, workers: int, clock: VirtualClock) -> None:
    class Failing(SlowSource):
        def __getitem__(self, key: int) -> int:
            if key == keys[bad]:
                raise OSError(f"cannot read {key}")
            return super().__getitem__(key)

    keys = IndexSampler(400, shuffle=True, seed=4, num_epochs=1).record_keys(0, 400)
    got, error = drain(loader(Failing(400, clock), workers, 8))
    assert got == [key * 2 for key in keys[:bad]]
    assert isinstance(error, OSError)
    assert f"cannot read {keys[bad]}" in str(error)
    assert f"index={bad}, record_key={keys[bad]}" in notes(error)


@repeated
def test_many_workers_timing_their_reads_at_once(repeat: int) -> None:
    """Tiny chunks on 8 workers: every chunk's first reads are timed, all at the same time."""
    source = [key * 2 for key in range(20_000)]  # a list: read key by key, each read timed while probing
    loader = DataLoader(
        data_source=source,
        sampler=IndexSampler(20_000, num_epochs=1),
        worker_count=8,
        read_options=ReadOptions(num_threads=4, prefetch_buffer_size=18),  # chunks of 2 records
    )
    assert list(loader) == source


def test_a_worker_still_timing_its_reads_waits_while_the_pool_is_full() -> None:
    """One worker has engaged the pool, whose `num_threads` reads are all in flight; another
    still times its first reads one by one, on its own thread. Its read waits for a slot:
    never `num_threads + 1` reads at once (the 7 of 6 once seen with two workers)."""
    pool = read_pool.ReadPool(3)
    pool.engaged = True
    lock, opened, started = threading.Lock(), threading.Event(), threading.Semaphore(0)
    counts = {"in_flight": 0, "most": 0}

    def read(key: int) -> int:
        with lock:
            counts["in_flight"] += 1
            counts["most"] = max(counts["most"], counts["in_flight"])
        started.release()
        assert opened.wait(30)
        with lock:
            counts["in_flight"] -= 1
        return key

    try:
        results = pool.map(read, range(3))
        for _ in range(3):
            assert started.acquire(timeout=30), "the pool's reads never started"
        prober = threading.Thread(target=lambda: list(pool.probing_map(read, [10])), name="prober")
        prober.start()
        started.acquire(timeout=0.5)  # a moment for the probe to start, if it may (a wait, not a check)
        assert counts["most"] == 3
    finally:
        opened.set()
    assert list(results) == [0, 1, 2]
    prober.join(30)
    pool.close()
    assert counts == {"in_flight": 0, "most": 3}


def test_a_close_ends_the_reads_not_started_with_stopped_and_joins_the_threads() -> None:
    """The caller of `map` waits for a read no thread will start: `close` (from another
    thread) answers it `Stopped`, the loader's "closed while this work ran"."""
    from aioloader._common.calls import Stopped

    pool = read_pool.ReadPool(1)
    entered, leave = threading.Event(), threading.Event()

    def read(key: int) -> int:
        entered.set()
        assert leave.wait(30)
        return key

    results = pool.map(read, [1, 2, 3])
    assert entered.wait(30)  # the one thread reads key 1; keys 2 and 3 wait in the queue
    closer = threading.Thread(target=pool.close)
    closer.start()
    leave.set()
    assert next(results) == 1  # the read in flight finishes
    with pytest.raises(Stopped):
        next(results)
    closer.join(30)
    assert not closer.is_alive()
    assert [t for t in threading.enumerate() if t.name.startswith("aioloader-read")] == []
    with pytest.raises(Stopped):  # a read asked for after the close: abandoned, not failed
        pool.map(read, [4])


def test_the_read_threads_start_one_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Thread.start` waits until the new thread runs: the reader that needs the pool waits
    for one start, and each read thread starts the next."""
    starters = note_thread_starts(monkeypatch)
    pool = read_pool.ReadPool(3)
    together = threading.Barrier(3, timeout=10)  # the first reads wait for all three threads

    def read(key: int) -> int:
        if key < 3:
            together.wait()
        return key * 2

    # Without the barrier the reads may all be done, under load, before the chain has
    # started its last thread, and the close would stop it there (as it should).
    assert list(pool.map(read, range(50))) == list(range(0, 100, 2))
    pool.close()
    caller = threading.current_thread().name
    assert starters == [
        (caller, "aioloader-read-0"),
        ("aioloader-read-0", "aioloader-read-1"),
        ("aioloader-read-1", "aioloader-read-2"),
    ]


@pytest.mark.parametrize(
    ("durations", "in_the_caller"),
    [
        # The first two reads slow: the rest of the chunk goes to the pool, not engaged by it.
        ([1e-3, 1e-3], 2),
        # A fast read first, or a slow one then a fast one (a file opened by the first read):
        # four reads timed, and the rest of the chunk read here.
        ([1e-6, 1e-3, 1e-3, 1e-3], 16),
        ([1e-3, 1e-6, 1e-3, 1e-6], 16),
        ([1e-6] * 4, 16),
    ],
)
def test_the_first_two_reads_slow_send_the_rest_of_the_chunk_to_the_pool(
    durations: list[float], in_the_caller: int, clock: VirtualClock
) -> None:
    """The first chunk is a whole batch that the first output waits for: once its first two
    reads have each been slow, the rest are read at once rather than timed one by one up to
    four. Only four slow reads in a row engage the pool for every later chunk."""
    pool = read_pool.ReadPool(4)
    readers: dict[int, str] = {}

    def read(key: int) -> int:
        readers[key] = threading.current_thread().name
        clock.advance(durations[key] if key < len(durations) else 1e-3)
        return key * 2

    try:
        assert list(pool.probing_map(read, list(range(16)))) == [key * 2 for key in range(16)]
        assert not pool.engaged
        caller = threading.current_thread().name
        assert [key for key in range(16) if readers[key] == caller] == list(range(in_the_caller))
        if in_the_caller == 2:  # the next chunk times four reads again: once per loader
            readers.clear()
            assert list(pool.probing_map(read, list(range(16, 32)))) == [key * 2 for key in range(16, 32)]
            assert [key for key in range(16, 32) if readers[key] == caller] == list(range(16, 18))
            assert pool.engaged  # four slow reads in a row: 0, 1, 16, 17
    finally:
        pool.close()


@pytest.mark.parametrize("bad", [0, 1, 2, 9])
def test_a_read_failing_after_the_first_two_slow_ones_is_raised_at_its_place(
    bad: int, clock: VirtualClock
) -> None:
    """The rest of the first chunk, sent to the pool: `list.extend` keeps the records read
    before the failing key, as the caller's own reads would."""
    pool = read_pool.ReadPool(4)

    def read(key: int) -> int:
        clock.advance(1e-3)
        if key == bad:
            raise OSError(f"cannot read {key}")
        return key * 2

    items: list[int] = []
    try:
        with pytest.raises(OSError, match=f"cannot read {bad}"):
            items.extend(pool.probing_map(read, list(range(16))))
    finally:
        pool.close()
    assert items == [key * 2 for key in range(bad)]


@repeated
def test_to_iter_dataset_closed_from_another_thread_while_its_reads_wait(
    repeat: int, clock: VirtualClock
) -> None:
    # The consumer waits for a chunk's reads on the read threads when another thread closes
    # the iterator: the consumer's next() ends, and every thread is joined.
    source = VerySlowSource(1000, clock)  # 2.5 s of reads: the close comes long before the end
    iterator = iter(MapDataset.source(source).to_iter_dataset(ReadOptions(num_threads=8)))
    assert next(iterator) == 0
    closer = threading.Timer(0.03, iterator.close)
    closer.start()
    got = [0, *iterator]
    closer.join()
    assert got == [key * 2 for key in range(len(got))]
    assert len(got) < 1000
    assert wait_for_no_threads() == []


def test_to_iter_dataset_read_failing_on_a_read_thread_is_raised_at_its_place(clock: VirtualClock) -> None:
    class Failing(VerySlowSource):
        def __getitem__(self, key: int) -> int:
            if key == 21:
                raise KeyError(f"record {key} is damaged")
            return super().__getitem__(key)

    got: list[int] = []
    with pytest.raises(KeyError, match="record 21 is damaged"):
        got.extend(MapDataset.source(Failing(40, clock)).to_iter_dataset(ReadOptions(num_threads=8)))
    assert got == [key * 2 for key in range(21)]
    assert wait_for_no_threads() == []


def run_bounded(target: Any, seconds: float = 20.0) -> None:
    """`target()` on a thread of its own; a hang fails here, not the whole session."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run, name="bounded")
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "hangs"
    if errors:
        raise errors[0]


class CallsItsIterator(SlowSource):
    """At key `at`, on a read thread, `call(iterator)` (the pipeline's own code calling its own
    iterator: refused); notes what that call raised."""

    def __init__(self, size: int, clock: VirtualClock, at: int, call: Any) -> None:
        super().__init__(size, clock)
        self.at, self.call = at, call
        self.iterator: Any = None
        self.raised: list[BaseException] = []

    def __getitem__(self, key: int) -> int:
        value = super().__getitem__(key)
        if key == self.at and threading.current_thread().name.startswith("aioloader-read"):
            try:
                self.call(self)
            except RuntimeError as error:
                self.raised.append(error)
                raise
        return value


@repeated
def test_a_read_calling_its_iterator_while_another_thread_closes_it_is_refused(
    repeat: int, clock: VirtualClock
) -> None:
    # `close()` took the engine away; the read thread's call was no longer known for the
    # pipeline's own and waited for the turn that the consumer held, waiting for that read;
    # `close()` waited for the read thread: all three hung.
    def close_and_call(source: CallsItsIterator) -> None:
        threading.Timer(0.01, source.iterator.close).start()
        next(source.iterator)

    source = CallsItsIterator(300, clock, 150, close_and_call)
    source.iterator = iter(loader(source, 0, 8))

    got: list[BaseException] = []

    def consume() -> None:
        try:
            list(source.iterator)  # ends: closed ...
        except RuntimeError as error:  # ... or with the refused call's error, in order
            got.append(error)

    run_bounded(consume)
    assert got in ([], source.raised)
    assert [type(error) for error in source.raised] == [RuntimeError]
    assert wait_for_no_threads() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_set_state_while_a_read_ahead_calls_its_iterator_is_refused(
    workers: int, clock: VirtualClock
) -> None:
    # `set_state()` closes the engine (joining its read threads) under the iterator's turn; a
    # read of that engine calling `next()` waited for the turn: a hang.
    entered, go = threading.Event(), threading.Event()

    def call_when_told(source: CallsItsIterator) -> None:
        entered.set()
        if go.wait(10):
            time.sleep(0.02)  # the consumer is in `set_state()` by now
        next(source.iterator)

    keys = IndexSampler(300, shuffle=True, seed=4, num_epochs=1).record_keys(0, 300)
    source = CallsItsIterator(300, clock, keys[100], call_when_told)
    source.iterator = iterator = iter(loader(source, workers, 8))
    start = iterator.get_state()

    def consume() -> None:
        for _ in iterator:
            time.sleep(0.002)  # the consumer's work, while reads run ahead
            if entered.is_set():
                go.set()
                iterator.set_state(start)
                return

    run_bounded(consume)
    assert [type(error) for error in source.raised] == [RuntimeError]
    source.at = -1  # reads as any source from here on
    with iterator:
        assert list(iterator) == [key * 2 for key in keys]
    assert wait_for_no_threads() == []


def test_close_from_another_thread_stops_the_early_read_of_worker_count_0(clock: VirtualClock) -> None:
    # `start_prefetch()`'s early read went on after a close: the pending `next()` read all 128
    # records of the first batch (3.2 s), and close() returned with its threads running.
    class Slower(SlowSource):
        def __getitem__(self, key: int) -> int:
            time.sleep(0.05)
            return super().__getitem__(key)

    source = Slower(2000, clock)
    iterator = iter(
        DataLoader(
            data_source=source,
            sampler=IndexSampler(2000, num_epochs=1),
            operations=[Batch(128)],
            read_options=ReadOptions(num_threads=4),
        )
    )
    iterator.start_prefetch()
    closed: list[list[threading.Thread]] = []

    def close_soon() -> None:
        time.sleep(0.1)
        iterator.close()
        closed.append(aioloader_threads())

    closer = threading.Thread(target=close_soon)
    closer.start()
    run_bounded(lambda: list(iterator))  # ends, with no output: the close came first
    closer.join(10)
    assert closed == [[]]  # close() joined them
    assert source.most_in_flight <= 4


def test_two_closes_at_once_both_return_with_the_readers_joined() -> None:
    """A `close()` from another thread and the consumer's own (the inline engine's, once its
    `next()` sees the close) close the pool at once: the second returned at once, its list
    of readers emptied by the first, while they still read (the fresh-clone CI, 3.13t on a
    starved machine: read threads alive after `close()` returned)."""
    pool = read_pool.ReadPool(2)
    entered, release = threading.Event(), threading.Event()

    def slow(key: int) -> int:
        entered.set()
        release.wait(10)
        return key

    pool.map(slow, [0])
    assert entered.wait(10)
    first = threading.Thread(target=pool.close)
    first.start()  # waits for the read in flight
    time.sleep(0.05)
    second_returned = threading.Event()
    second = threading.Thread(target=lambda: (pool.close(), second_returned.set()))
    second.start()
    time.sleep(0.1)
    assert not second_returned.is_set()  # a read is still in flight
    release.set()
    first.join(10)
    second.join(10)
    assert second_returned.is_set()
    assert [t for t in aioloader_threads() if t.name.startswith("aioloader-read")] == []

"""`ReadOptions.num_threads` reads in flight from a slow random-access source."""

from __future__ import annotations

import threading
import time

import pytest

from aioloader import DataLoader, IndexSampler, ReadOptions
from tests.conftest import aioloader_threads, repeated
from tests.support.outputs import drain, notes


class SlowSource:
    """Each read waits 1 ms (a network disk); counts the reads in flight."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.001)
        with self.lock:
            self.in_flight -= 1
        return key * 2


def loader(source: SlowSource, workers: int, threads: int) -> DataLoader:
    return DataLoader(
        data_source=source,
        sampler=IndexSampler(source.size, shuffle=True, seed=4, num_epochs=1),
        worker_count=workers,
        read_options=ReadOptions(num_threads=threads),
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
def test_slow_reads_go_to_num_threads_threads_in_order(workers: int, threads: int, repeat: int) -> None:
    source = SlowSource(400)
    keys = IndexSampler(400, shuffle=True, seed=4, num_epochs=1).record_keys(0, 400)
    assert list(loader(source, workers, threads)) == [key * 2 for key in keys]
    assert workers < source.most_in_flight <= threads


def test_read_threads_are_joined_on_close() -> None:
    source = SlowSource(10_000)
    with iter(loader(source, 2, 8)) as iterator:
        for _ in range(200):
            next(iterator)
        assert any(t.name.startswith("aioloader-read") for t in aioloader_threads())
    assert aioloader_threads() == []


def test_fast_reads_stay_on_the_workers() -> None:
    class Fast(SlowSource):
        def __getitem__(self, key: int) -> int:
            return key * 2

    assert_no_read_threads(Fast(5000))


def test_now_and_then_a_slow_read_stays_on_the_workers() -> None:
    """A worker that waits for the GIL or a core now and then has a few slow reads
    among fast ones: that is no reason to move cheap reads to the pool."""

    class Hiccups(SlowSource):
        def __init__(self, size: int) -> None:
            super().__init__(size)
            self.reads = 0

        def __getitem__(self, key: int) -> int:
            with self.lock:
                self.reads += 1
                hiccup = self.reads % 3 == 1  # the very first read too
            if hiccup:
                time.sleep(0.002)
            return key * 2

    assert_no_read_threads(Hiccups(3000))


@pytest.mark.parametrize(
    "bad", [0, 2, 5, 300]
)  # among the first reads of a chunk, timed one by one, or after
def test_a_failing_slow_read_is_reported_at_its_place(bad: int) -> None:
    class Failing(SlowSource):
        def __getitem__(self, key: int) -> int:
            if key == keys[bad]:
                raise OSError(f"cannot read {key}")
            return super().__getitem__(key)

    keys = IndexSampler(400, shuffle=True, seed=4, num_epochs=1).record_keys(0, 400)
    got, error = drain(loader(Failing(400), 2, 8))
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

"""The first batch made in parts (`_scheduling/first_batch`), attacked: every output, state and
error must be what `worker_count=0` gives, and what an uninterrupted run gives after a resume.

Covered: resumes from a state taken after 0, 1 and 2 outputs (the first batch then made in
parts from a mid-position); datasets smaller than a batch, of exactly one, one more than one,
with and without `drop_remainder`; two epochs with the first batch across their boundary;
sharding; random maps before and after `Batch` (the records' and the batch's generators); a
flat-map and a filter after `Batch` (states inside a batch); filters before `Batch` dropping
every record of the first batch, or all but one (the tail plan: never cut, compared all the
same); a source whose `__len__` claims more records than it has; a Grain state of several
workers (a detoured walk); parts forced to finish last-first (a record of the first part waits
until one of the last part has run) with a ValueError, StopIteration, KeyboardInterrupt or
SystemExit in the later part; at most `worker_count` threads in user code at once; `close()`
and `aclose()` from elsewhere while parts run; `for` and `async for`; worker counts 2, 3, 4 and
"auto"; the tuner changing level at random after outputs, with restarts.

Failing when written (bugs, left failing on purpose): an interrupt (KeyboardInterrupt,
SystemExit) in a record after a failing one in the same first batch reaches the consumer
instead of the error (`test_an_error_then_an_interrupt_later_in_the_first_batch`); the error of
a part waits for a later part that the consumer's own thread runs
(`test_an_error_is_not_held_back_by_a_later_part_the_consumer_runs`); an operation that cannot
be copied for the workers lets the consumer deliver the first batch it made itself before the
copy's error (`test_an_operation_that_cannot_be_copied_fails_before_any_batch`, also before
the parts change).

No assertion reads a clock: orders are forced with events, and the waits' timeouts only turn a
hang into a failure.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader import _loader as loader_module
from aioloader._executors import tuning
from aioloader._program.program import Stage
from aioloader._scheduling.scheduler import Scheduler
from tests.conftest import repeated, wait_for_no_threads

WAIT = 30.0  # seconds: only a hang reaches it

# ---------------------------------------------------------------------------------------------
# Transforms and sources


class Noisy(aioloader.RandomMapTransform):
    """Each record with two numbers from its generator."""

    def random_map(self, x: Any, rng: np.random.Generator) -> dict[str, Any]:
        return {"x": np.int64(x), "noise": rng.integers(1 << 30, size=2)}


class Scale(aioloader.RandomMapTransform):
    """After `Batch`: a number from the batch's generator (its last record's)."""

    def random_map(self, batch: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return {**batch, "scale": rng.random()}


class Halves(aioloader.FlatMapTransform):
    """After `Batch`: each batch as two outputs, so that a state may fall inside a batch."""

    def flat_map(self, batch: dict[str, Any]) -> list[Any]:
        xs = batch["x"]
        middle = (len(xs) + 1) // 2
        return [xs[:middle], xs[middle:]] if len(xs) > 1 else [xs]


class SomeBatches(aioloader.FilterTransform):
    """After `Batch`: drops some batches."""

    def filter(self, batch: dict[str, Any]) -> bool:
        return int(batch["x"].sum()) % 4 != 1


class Drop(aioloader.FilterTransform):
    """Before `Batch` (the tail plan): drops the records in `dropped`."""

    def __init__(self, dropped: frozenset[int]) -> None:
        self.dropped = dropped

    def filter(self, element: dict[str, Any]) -> bool:
        return int(element["x"]) not in self.dropped


class Fails(aioloader.MapTransform):
    """Raises `errors[x]` on record `x`."""

    def __init__(self, errors: dict[int, type[BaseException]]) -> None:
        self.errors = errors

    def map(self, element: dict[str, Any]) -> dict[str, Any]:
        error = self.errors.get(int(element["x"]))
        if error is not None:
            raise error(f"record {int(element['x'])}")
        return element


class Lying:
    """A source whose `__len__` claims `claims` records; reads past `real` raise IndexError."""

    def __init__(self, real: int, claims: int) -> None:
        self.real, self.claims = real, claims

    def __len__(self) -> int:
        return self.claims

    def __getitem__(self, key: int) -> int:
        if not 0 <= key < self.real:
            raise IndexError(f"no record {key}")
        return key

    def __repr__(self) -> str:  # states name the source by its repr
        return f"Lying({self.real}, {self.claims})"


def canonical(value: Any) -> Any:
    """`value` as plain, comparable data: dtypes and shapes included."""
    if isinstance(value, dict):
        return {key: canonical(item) for key, item in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [canonical(item) for item in value])
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tolist())
    if isinstance(value, np.generic):
        return ("scalar", str(value.dtype), value.item())
    return value


def described(error: BaseException) -> tuple[str, str, list[str]]:
    return type(error).__name__, str(error), list(getattr(error, "__notes__", []))


# ---------------------------------------------------------------------------------------------
# Runs: outputs with the state after each, then the error (None at the end)

Run = tuple[list[tuple[Any, bytes]], tuple[str, str, list[str]] | None]


def iterate(loader: aioloader.DataLoader, state: bytes | None, use_async: bool, limit: int = 60) -> Run:
    """Every output (at most `limit`) with the state after it, from `state`; then the error."""
    if use_async:
        return asyncio.run(_aiterate(loader, state, limit))
    out: list[tuple[Any, bytes]] = []
    iterator = iter(loader)
    try:
        if state is not None:
            iterator.set_state(state)
        for batch in iterator:
            out.append((canonical(batch), iterator.get_state()))
            if len(out) == limit:
                break
    except BaseException as error:  # KeyboardInterrupt and SystemExit from the records on purpose
        return out, described(error)
    finally:
        iterator.close()
    return out, None


async def _aiterate(loader: aioloader.DataLoader, state: bytes | None, limit: int) -> Run:
    out: list[tuple[Any, bytes]] = []
    iterator = loader.__aiter__()
    try:
        if state is not None:
            iterator.set_state(state)
        async for batch in iterator:
            out.append((canonical(batch), iterator.get_state()))
            if len(out) == limit:
                break
    except BaseException as error:  # as above
        return out, described(error)
    finally:
        await iterator.aclose()
    return out, None


def state_after(make: Callable[[int | str], aioloader.DataLoader], outputs: int) -> bytes | None:
    """The state of a `worker_count=0` run after `outputs` outputs (None if it has fewer)."""
    with iter(make(0)) as iterator:
        try:
            for _ in range(outputs):
                next(iterator)
        except (StopIteration, Exception):
            return None
        return iterator.get_state()


def assert_like_worker_count_0(
    make: Callable[[int | str], aioloader.DataLoader],
    resumes: tuple[int, ...] = (0, 1, 2),
    workers: tuple[int | str, ...] = (2, 3, 4, "auto"),
) -> None:
    """From a fresh start and from the states after `resumes` outputs, each worker count with
    `for` and `async for` gives what `worker_count=0` gives; and a resumed run continues
    an uninterrupted one exactly."""
    whole = iterate(make(0), None, False, limit=1000)
    for resume in (None, *resumes):
        state = None if resume is None else state_after(make, resume)
        if resume is not None and state is None:
            continue  # fewer outputs than that
        want = iterate(make(0), state, False)
        if resume is not None:
            assert want[0] == whole[0][resume:][: len(want[0])], f"worker_count=0 resumed at {resume}"
            if len(whole[0]) - resume <= len(want[0]):
                assert want[1] == whole[1], f"worker_count=0 resumed at {resume}"
        for count in workers:
            for use_async in (False, True):
                got = iterate(make(count), state, use_async)
                where = f"worker_count={count!r}, async={use_async}, resumed after {resume} outputs"
                assert [o for o, _ in got[0]] == [o for o, _ in want[0]], where
                assert [s for _, s in got[0]] == [s for _, s in want[0]], where
                assert got[1] == want[1], where


@pytest.fixture(autouse=True)
def four_cpus_for_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "auto" may start 4 workers here, as on a 4-core machine (levels 0 to 4)."""
    monkeypatch.setattr(loader_module, "default_maximum", lambda: 4)


# ---------------------------------------------------------------------------------------------
# Sizes, epochs, shards, resumes


def fused(
    records: int,
    batch_size: int,
    drop_remainder: bool,
    epochs: int = 1,
    shard: aioloader.ShardOptions | None = None,
    after: list[Any] | None = None,
    errors: dict[int, type[BaseException]] | None = None,
    source: Any = None,
    shuffle: bool = True,
) -> Callable[[int | str], aioloader.DataLoader]:
    def make(workers: int | str) -> aioloader.DataLoader:
        operations: list[Any] = [Noisy()]
        if errors:
            operations.append(Fails(errors))
        operations += [aioloader.Batch(batch_size, drop_remainder=drop_remainder), Scale(), *(after or [])]
        sampler = aioloader.IndexSampler(
            records,
            shard_options=shard or aioloader.NoSharding(),
            shuffle=shuffle,
            num_epochs=epochs,
            seed=11,
        )
        return aioloader.DataLoader(
            data_source=source if source is not None else aioloader.RangeDataSource(0, records),
            sampler=sampler,
            operations=operations,
            worker_count=workers,
        )

    return make


SIZES = [(8, extra) for extra in (-7, -1, 0, 1, 9)] + [(5, 0), (3, 1)]


@pytest.mark.parametrize(("batch_size", "extra"), SIZES, ids=[f"bs{b}{e:+d}" for b, e in SIZES])
@pytest.mark.parametrize("drop_remainder", [False, True], ids=["keep", "drop"])
@pytest.mark.parametrize("epochs", [1, 2])
def test_sizes_around_one_batch_and_epoch_boundaries(
    batch_size: int, extra: int, drop_remainder: bool, epochs: int
) -> None:
    """Smaller than one batch, exactly one, one more, ...; two epochs put the first batch (and
    the resumed ones) across the epoch boundary when the dataset is not a multiple."""
    assert_like_worker_count_0(fused(batch_size + extra, batch_size, drop_remainder, epochs))


SHARDS = [(0, 2, False), (1, 2, False), (1, 2, True), (2, 3, False), (2, 3, True)]


@pytest.mark.parametrize(("index", "count", "drop"), SHARDS, ids=[f"{i}of{c}-{d}" for i, c, d in SHARDS])
@pytest.mark.parametrize("records", [7, 17, 25])
def test_sharded(index: int, count: int, drop: bool, records: int) -> None:
    shard = aioloader.ShardOptions(index, count, drop)
    assert_like_worker_count_0(fused(records, 4, False, epochs=2, shard=shard), workers=(2, 4))


@pytest.mark.parametrize("after", ["halves", "filter"])
@pytest.mark.parametrize("records", [7, 8, 21])
def test_outputs_after_batch_states_inside_a_batch(after: str, records: int) -> None:
    """A flat-map after `Batch` makes states inside a batch (those resume whole, not in
    parts); a filter after it drops some batches, the first one among them."""
    operations = [Halves()] if after == "halves" else [SomeBatches()]
    assert_like_worker_count_0(fused(records, 4, False, epochs=2, after=operations), resumes=(0, 1, 2, 3))


def test_a_source_whose_len_lies() -> None:
    """It claims 20 records and has 13: the read of record 13 fails in the second batch, which
    is the first one after a resume (in its third part with 2 workers), named as
    `worker_count=0` names it."""
    for drop_remainder in (False, True):
        make = fused(20, 8, drop_remainder, source=Lying(13, 20), shuffle=False)
        assert_like_worker_count_0(make, workers=(2, 3, "auto"))


def test_a_grain_state_of_several_workers() -> None:
    """Grain's workers left records behind their furthest: the resumed walk is detoured, and
    its first batch, cut in parts, reads the detoured positions."""
    make = fused(60, 8, False, epochs=2)
    with iter(make(0)) as iterator:
        document = json.loads(iterator.get_state())
    del document["aioloader"]
    for starts in ([6, 7, 5], [3, 31, 17], [12, 5], [4, 5, 6, 7]):
        document["worker_count"] = len(starts)
        document["last_seen_indices"] = {str(w): start - len(starts) for w, start in enumerate(starts)}
        state = json.dumps(document).encode()
        want = iterate(make(0), state, False)
        for count in (2, 3, 4):
            assert iterate(make(count), state, False) == want, (starts, count)


# ---------------------------------------------------------------------------------------------
# Filters before `Batch` (the tail plan): the first batch's records all dropped, or all but one

FILTERED = ["all of the first", "all but the first", "all but the last", "every record", "all but one"]


def dropped_records(kind: str, records: int, batch_size: int) -> frozenset[int]:
    first = set(range(min(batch_size, records)))
    return frozenset(
        {
            "all of the first": first,
            "all but the first": first - {0},
            "all but the last": first - {max(first)},
            "every record": set(range(records)),
            "all but one": set(range(records)) - {records // 2},
        }[kind]
    )


@pytest.mark.parametrize("kind", FILTERED)
@pytest.mark.parametrize("drop_remainder", [False, True], ids=["keep", "drop"])
@pytest.mark.parametrize("records", [3, 4, 5, 9])
def test_a_filter_before_batch_empties_the_first_batch(kind: str, drop_remainder: bool, records: int) -> None:
    def make(workers: int | str) -> aioloader.DataLoader:
        return aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, records),
            sampler=aioloader.IndexSampler(records, num_epochs=2, seed=5),
            operations=[
                Noisy(),
                Drop(dropped_records(kind, records, 4)),
                aioloader.Batch(4, drop_remainder=drop_remainder),
                Scale(),
            ],
            worker_count=workers,
        )

    assert_like_worker_count_0(make, workers=(2, 3, "auto"))


# ---------------------------------------------------------------------------------------------
# Parts in a forced order, errors in the later part, threads at once


class Gate(aioloader.RandomMapTransform):
    """Record `waiter` waits until record `last` has run (or raised); `errors[x]` is raised by
    record `x`. One object for every thread (no copy), counting the threads inside at once."""

    def __init__(self, waiter: int, last: int, errors: dict[int, type[BaseException]], hold: bool) -> None:
        self.waiter, self.last, self.errors, self.hold = waiter, last, errors, hold
        self.reached = threading.Event()
        self._lock = threading.Lock()
        self.inside = self.most_inside = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> Gate:
        return self

    def random_map(self, x: int, rng: np.random.Generator) -> dict[str, Any]:
        with self._lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            if self.hold and x == self.waiter:
                assert self.reached.wait(WAIT), f"record {self.last} never ran"
            try:
                error = self.errors.get(x)
                if error is not None:
                    raise error(f"record {x}")
                return {"x": np.int64(x), "noise": rng.integers(1 << 30, size=2)}
            finally:
                if x == self.last:
                    self.reached.set()
        finally:
            with self._lock:
                self.inside -= 1


def gated(gate: Gate, workers: int | str, records: int = 40) -> aioloader.DataLoader:
    return aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, records),
        sampler=aioloader.IndexSampler(records, num_epochs=1, seed=4),  # in order: parts known
        operations=[gate, aioloader.Batch(8), Scale()],
        worker_count=workers,
    )


ERRORS: list[type[BaseException] | None] = [None, ValueError, StopIteration, KeyboardInterrupt, SystemExit]


@repeated
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: "none" if e is None else e.__name__)
@pytest.mark.parametrize("resume", [0, 1, 2])
def test_a_slow_first_part_and_a_fast_later_one(
    error: type[BaseException] | None, resume: int, repeat: int
) -> None:
    """A record of the first part waits until the first batch's last record has run, so the
    later parts finish first; that last record may raise. With 2, 3 and 4 workers (parts of
    2, 1 and 1 records), `for` and `async for`, as `worker_count=0` gives it, and never more
    threads in the user's code at once than `worker_count`."""
    base = 8 * resume
    errors = {} if error is None else {base + 7: error}
    state = state_after(lambda workers: gated(Gate(-1, -1, {}, False), workers), resume)
    want = iterate(gated(Gate(base, base + 7, errors, hold=False), 0), state, False)
    for count in (2, 3, 4):
        for use_async in (False, True):
            gate = Gate(base, base + 7, errors, hold=True)
            assert iterate(gated(gate, count), state, use_async) == want, (count, use_async)
            assert gate.most_inside <= count
    assert not wait_for_no_threads(2.0)


class Stuck(aioloader.MapTransform):
    """Record 1 raises a ValueError; record 7 waits until the test, having received that
    error, lets it go (`HELD` seconds at most: only a hang reaches that). More than the 2 s
    that closing the loader on the error may wait for a worker held in record 7."""

    HELD = 5.0

    def __init__(self) -> None:
        self.release = threading.Event()
        self.outwaited = False  # record 7 was let go by the timeout, not by the test

    def __deepcopy__(self, memo: dict[int, Any]) -> Stuck:
        return self

    def map(self, x: int) -> int:
        if x == 1:
            raise ValueError("record 1")
        if x == 7:
            self.outwaited = not self.release.wait(self.HELD)
        return x


@repeated
@pytest.mark.parametrize("use_async", [False, True], ids=["for", "async-for"])
def test_an_error_is_not_held_back_by_a_later_part(use_async: bool, repeat: int) -> None:
    """Record 1 of the first batch fails; record 7, in a later part, does not return until
    the consumer has the error. `worker_count=0` (and the batch made whole) raises at record 1
    and never maps record 7; made in parts, the error must not wait for record 7's part (a
    record that never returns would hang the loader instead of reporting the error): a
    worker's part is not waited for (cd2bc01), and the consumer's thread takes no part past
    one still running (see the next test, which drives it by hand)."""
    for workers in (0, 2):
        stuck = Stuck()
        loader = aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, 32),
            sampler=aioloader.SequentialSampler(32),
            operations=[stuck, aioloader.Batch(8)],
            worker_count=workers,
        )
        got = iterate(loader, None, use_async and workers > 0)
        stuck.release.set()
        assert got[0] == []
        assert got[1] is not None
        assert got[1][:2] == ("ValueError", "record 1")
        assert not stuck.outwaited, f"worker_count={workers}: the error waited for record 7"


class StuckOnTheConsumer(aioloader.MapTransform):
    """Record 1 raises a ValueError; record 2 waits until the test has that error (`HELD`
    seconds at most: only a hang reaches that)."""

    HELD = 2.0

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.outwaited = False

    def __deepcopy__(self, memo: dict[int, Any]) -> StuckOnTheConsumer:
        return self

    def map(self, x: int) -> int:
        if x == 1:
            raise ValueError("record 1")
        if x == 2:
            self.entered.set()
            self.outwaited = not self.release.wait(self.HELD)
        return x


def test_the_consumer_takes_no_part_while_an_earlier_one_runs() -> None:
    """The scheduler driven by hand (as in test_first_output): this thread, a worker, takes
    part 0 (records 0 and 1) of the first batch. A consumer in `get` does not take part 1
    while part 0 runs: had part 0 failed, part 1's records would be ones `worker_count=0`
    never maps, and a record stuck there would hold the error back. Record 1 fails: the
    consumer gets the error, and record 2 is never mapped."""
    stuck = StuckOnTheConsumer()
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 32),
        sampler=aioloader.SequentialSampler(32),
        operations=[stuck, aioloader.Batch(8)],
        worker_count=2,
    )
    spec = loader._spec
    sched = Scheduler(spec.program(None), (0, 0, 0), spec.window, 2)
    worker = sched.program.for_worker().run_segment
    part0 = sched.next_work(wait=False)  # cuts the first batch
    assert part0 is not None
    assert part0.stage is Stage.PARTS
    answers: list[Any] = []
    consumer = threading.Thread(target=lambda: answers.append(sched.get(sched.program.run_segment)))
    consumer.start()
    try:
        part0.run_segment(worker)  # record 1 fails
        sched.advance(part0, worker=True)
        join = sched.next_work(wait=False)
        if join is not None:  # else the consumer took the join itself
            assert join.stage is Stage.JOIN
            join.run_segment(worker)
            sched.advance(join, worker=True)
        consumer.join(WAIT)
        assert not consumer.is_alive()
    finally:
        stuck.release.set()
        consumer.join(WAIT)
        sched.close()
    outputs, _ = answers[0]
    assert outputs.items == []
    assert isinstance(outputs.failure.error, ValueError)
    assert not stuck.entered.is_set(), "the consumer ran records past the failing one"


# ---------------------------------------------------------------------------------------------
# Closes while the parts run


class Held(aioloader.MapTransform):
    """Every record waits for `go`; `waiting` counts the threads that are held."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.waiting = threading.Semaphore(0)

    def __deepcopy__(self, memo: dict[int, Any]) -> Held:
        return self

    def map(self, x: int) -> int:
        self.waiting.release()
        assert self.go.wait(WAIT)
        return x


def engine_of(iterator: Any) -> Any:
    """The iterator's threaded engine, once made (its workers may run parts before it is)."""
    while iterator._cursor.holder.engine is None:
        threading.Event().wait(0.001)
    return iterator._cursor.holder.engine


def closed(scheduler: Any) -> bool:
    with scheduler._lock:
        return bool(scheduler._closed)


def released() -> Held:
    held = Held()
    held.go.set()
    return held


def held_loader(held: Held, workers: int | str) -> aioloader.DataLoader:
    return aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 64),
        sampler=aioloader.IndexSampler(64, num_epochs=1, seed=1),
        operations=[held, aioloader.Batch(16)],
        worker_count=workers,
    )


@repeated
@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("resume", [0, 1])
def test_close_from_another_thread_while_every_thread_is_in_a_part(
    workers: int, resume: int, repeat: int
) -> None:
    """`worker_count` threads hold parts (the consumer's among them, or not); a close from
    another thread ends the consumer's `next()` with the end, and joins every thread."""
    state = state_after(lambda count: held_loader(released(), count), resume)
    held = Held()
    iterator = iter(held_loader(held, workers))
    if state is not None:
        iterator.set_state(state)
    answers: list[Any] = []
    consumer = threading.Thread(target=lambda: answers.append(next(iterator, "ended")))
    consumer.start()
    for _ in range(workers):  # as many threads in parts as may be
        assert held.waiting.acquire(timeout=WAIT)
    # States to reach, not times: the engine is made (its workers may hold parts before it
    # is), then the close has stopped its scheduler; only then do the records go on.
    scheduler = engine_of(iterator).scheduler
    closer = threading.Thread(target=iterator.close)
    closer.start()
    while not closed(scheduler):
        threading.Event().wait(0.001)
    held.go.set()
    closer.join(WAIT)
    consumer.join(WAIT)
    assert not consumer.is_alive()
    assert answers == ["ended"]
    assert not wait_for_no_threads(2.0)


@repeated
@pytest.mark.parametrize("workers", [2, 3, "auto"])
def test_aclose_while_the_parts_run(workers: int | str, repeat: int) -> None:
    """`async for`: the workers hold parts; `aclose()` from another task ends the loop's
    `__anext__` with the end; every thread is joined."""
    held = Held()

    async def main() -> list[Any]:
        iterator = held_loader(held, workers).__aiter__()
        got: list[Any] = []

        async def consume() -> None:
            async for batch in iterator:
                got.append(batch)

        task = asyncio.create_task(consume())
        while not held.waiting.acquire(blocking=False):
            await asyncio.sleep(0.001)
        while iterator._cursor.holder.engine is None:
            await asyncio.sleep(0.001)
        scheduler = engine_of(iterator).scheduler
        closing = asyncio.create_task(iterator.aclose())
        while not closed(scheduler):
            await asyncio.sleep(0.001)
        held.go.set()  # the records in progress end; no part starts after the close
        await asyncio.wait_for(closing, WAIT)
        await asyncio.wait_for(task, WAIT)
        return got

    assert asyncio.run(main()) == []
    assert not wait_for_no_threads(2.0)


# ---------------------------------------------------------------------------------------------
# The tuner changing level at random


@pytest.fixture
def random_levels(monkeypatch: pytest.MonkeyPatch) -> random.Random:
    """After half of the outputs (chosen by a seeded generator), the tuner sets a level
    drawn at random among its levels, adding or retiring workers, or going to the consumer's
    thread; after the others it measures as usual."""
    chooser = random.Random(0)
    measure = tuning.Tuner.delivered

    def delivered(self: tuning.Tuner, weight: int, waited: float) -> None:
        if chooser.random() < 0.5:
            self._set(chooser.choice(self._levels))
        else:
            measure(self, weight, waited)

    monkeypatch.setattr(tuning.Tuner, "delivered", delivered)
    return chooser


def slow_and_fast(records: int) -> Callable[[int | str], aioloader.DataLoader]:
    """Records slow and fast in phases of 50 (a sleep that lets the other threads run)."""

    class Phased(aioloader.RandomMapTransform):
        def random_map(self, x: int, rng: np.random.Generator) -> dict[str, Any]:
            if (x // 50) % 2:
                threading.Event().wait(0.0002)
            return {"x": np.int64(x), "noise": rng.integers(1 << 30, size=2)}

    def make(workers: int | str) -> aioloader.DataLoader:
        return aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, records),
            sampler=aioloader.IndexSampler(records, num_epochs=2, seed=9),
            operations=[Phased(), aioloader.Batch(6), Scale(), Halves()],
            worker_count=workers,
            read_options=aioloader.ReadOptions(num_threads=2, prefetch_buffer_size=12),
        )

    return make


@repeated
@pytest.mark.parametrize("workers", [2, 4, "auto"])
def test_random_levels_and_restarts(random_levels: random.Random, workers: int | str, repeat: int) -> None:
    """Levels change at random between outputs, and `set_state(get_state())` restarts the
    pipeline (a new first batch, in parts) every few outputs: the outputs and states are
    those of `worker_count=0`."""
    make = slow_and_fast(150)
    random_levels.seed(repeat)
    want = iterate(make(0), None, False, limit=1000)
    for use_async in (False, True):
        restarts = {random_levels.randrange(1, 20) for _ in range(3)}
        got = asyncio.run(_restarting_async(make(workers), restarts)) if use_async else None
        if got is None:
            got = _restarting(make(workers), restarts)
        assert got == want, f"async={use_async}, restarts after {sorted(restarts)}"


def _restarting(loader: aioloader.DataLoader, restarts: set[int]) -> Run:
    out: list[tuple[Any, bytes]] = []
    with iter(loader) as iterator:
        for batch in iterator:
            out.append((canonical(batch), iterator.get_state()))
            if len(out) in restarts:
                iterator.set_state(iterator.get_state())
    return out, None


async def _restarting_async(loader: aioloader.DataLoader, restarts: set[int]) -> Run:
    out: list[tuple[Any, bytes]] = []
    iterator = loader.__aiter__()
    try:
        async for batch in iterator:
            out.append((canonical(batch), iterator.get_state()))
            if len(out) in restarts:
                iterator.set_state(iterator.get_state())
    finally:
        await iterator.aclose()
    return out, None


# ---------------------------------------------------------------------------------------------
# Many random pipelines


def random_pipeline(seed: int) -> Callable[[int | str], aioloader.DataLoader]:
    chooser = random.Random(seed)
    batch_size = chooser.choice([2, 3, 4, 8])
    records = chooser.choice([1, batch_size - 1, batch_size, batch_size + 1, 2 * batch_size + 1, 23])
    records = max(records, 1)
    errors: dict[int, type[BaseException]] = {}
    if chooser.random() < 0.4:
        errors[chooser.randrange(records)] = chooser.choice([ValueError, StopIteration, KeyError])
    after: list[Any] = chooser.choice([[], [Halves()], [SomeBatches()]])
    return fused(
        records,
        batch_size,
        chooser.random() < 0.5,
        epochs=chooser.choice([1, 2, 3]),
        after=after,
        errors=errors,
    )


@pytest.mark.parametrize("seed", range(12))
def test_random_pipelines(seed: int) -> None:
    assert_like_worker_count_0(random_pipeline(seed), workers=(2, 3, "auto"))

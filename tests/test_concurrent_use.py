"""One iterator used from several threads or tasks at once, and other uses a consumer
does not plan for: calls take turns, a cancelled `anext` loses nothing, `set_state`
from elsewhere lands between two outputs, and two iterators of one loader never share
a transform's state. Found by a hostile review: a crash, a hang, epochs that ended
early without an error, and wrong records.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest

from aioloader import (
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    IterDataset,
    MapDataset,
    MapTransform,
    RangeDataSource,
    RecordMetadata,
)
from tests.conftest import repeated, wait_for_no_threads
from tests.support.transforms import ServesFewer

N = 600
WORKERS: list[int | str] = [0, 2, "auto"]


def loader(workers: int | str, operations: list[Any] | None = None, n: int = N) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, n),
        sampler=IndexSampler(n, shuffle=True, seed=3, num_epochs=1),
        operations=operations or [],
        worker_count=workers,
    )


def expected(n: int = N) -> list[int]:
    return [int(x) for x in loader(0, n=n)]


@repeated
@pytest.mark.parametrize("workers", WORKERS)
def test_two_threads_on_one_iterator_take_turns(workers: int | str, repeat: int) -> None:
    """Each record goes to exactly one thread, and each thread's share keeps the order
    (before: a crash of the process, `itertools.chain` entered from two threads)."""
    got: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)
    with iter(loader(workers)) as iterator:

        def take(k: int) -> None:
            start.wait()
            try:
                got[k].extend(int(x) for x in iterator)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=take, args=(k,)) for k in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert errors == []
    wanted = expected()
    order = {x: i for i, x in enumerate(wanted)}
    assert Counter(got[0] + got[1]) == Counter(wanted)
    for share in got:
        assert share == sorted(share, key=order.__getitem__)
    assert wait_for_no_threads() == []


class Slow(MapTransform):
    def map(self, element: int) -> int:
        if element % 17 == 0:
            time.sleep(0.0005)
        return element


def batches_and_state_after(count: int) -> tuple[list[list[int]], bytes]:
    """Every batch of the slow pipeline, and its state after `count` of them."""
    wanted = [b.tolist() for b in loader(0, [Slow(), Batch(4)])]
    with iter(loader(0, [Slow(), Batch(4)])) as first:
        for _ in range(count):
            next(first)
        return wanted, first.get_state()


@repeated
@pytest.mark.parametrize("workers", WORKERS)
def test_set_state_from_another_thread_lands_between_two_outputs(workers: int | str, repeat: int) -> None:
    """The consumer goes on from the state's position (or had ended already, and
    `set_state` says so); before, its loop ended early without an error."""
    wanted, state = batches_and_state_after(10)
    got: list[list[int]] = []
    iterator = iter(loader(workers, [Slow(), Batch(4)]))
    consumer = threading.Thread(target=lambda: got.extend(b.tolist() for b in iterator))
    consumer.start()
    time.sleep(0.002 * (repeat % 3))
    restarted = True
    try:
        iterator.set_state(state)
    except ValueError as error:
        restarted = "has ended" not in str(error)  # else: the set_state's own error
        if restarted:
            raise
    consumer.join(60)
    iterator.close()
    if restarted:
        assert any(got == wanted[:m] + wanted[10:] for m in range(len(got) + 1))
    else:
        assert got == wanted
    assert wait_for_no_threads() == []


@repeated
@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.asyncio
async def test_two_tasks_awaiting_one_iterator_take_turns(workers: int | str, repeat: int) -> None:
    """Before: the second task's wait replaced the first one's, which hung for good."""
    async with aiter(loader(workers, [Batch(4)])) as iterator:

        async def take() -> list[int]:
            return [x for batch in [b async for b in iterator] for x in batch.tolist()]

        first, second = await asyncio.wait_for(asyncio.gather(take(), take()), 60)
    assert Counter(first + second) == Counter(range(N))


class SlowAt(MapTransform):
    """Sleeps at one record, long enough for a timeout around `anext` to fire."""

    def __init__(self, at: int, seconds: float) -> None:
        self.at, self.seconds = at, seconds

    def map(self, element: int) -> int:
        if element == self.at:
            time.sleep(self.seconds)
        return element


class AsyncSlowAt:
    """The same as an `async def` map (awaited on the loop; at worker_count=0, in the
    consumer's own task)."""

    def __init__(self, at: int, seconds: float) -> None:
        self.at, self.seconds = at, seconds

    async def __call__(self, element: int) -> int:
        if element == self.at:
            await asyncio.sleep(self.seconds)
        return element


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("kind", [SlowAt, AsyncSlowAt])
@pytest.mark.asyncio
async def test_a_cancelled_anext_loses_nothing(workers: int | str, kind: type[Any]) -> None:
    """`asyncio.wait_for(anext(iterator), timeout)` that times out: the iterator goes on,
    every record comes once, in order. Before: the next `anext` ended the epoch."""
    data = DataLoader(
        data_source=RangeDataSource(0, 12),
        sampler=IndexSampler(12, num_epochs=1),
        operations=[kind(5, 0.3)],
        worker_count=workers,
    )
    got: list[int] = []
    timeouts = 0
    async with aiter(data) as iterator:
        while True:
            try:
                got.append(int(await asyncio.wait_for(anext(iterator), 0.05)))
            except TimeoutError:
                timeouts += 1
            except StopAsyncIteration:
                break
    if workers != 0 or kind is AsyncSlowAt:  # a sync map at 0 blocks the loop: no timeout fires
        assert timeouts >= 1
    assert got == list(range(12))


@pytest.mark.parametrize("workers", [2, "auto"])
@pytest.mark.asyncio
async def test_set_state_from_another_task_moves_the_waiting_consumer(workers: int | str) -> None:
    """Before: the consumer's `async for` ended there without an error."""
    wanted, state = batches_and_state_after(10)
    got: list[list[int]] = []
    async with aiter(loader(workers, [Slow(), Batch(4)])) as iterator:
        got.append((await anext(iterator)).tolist())

        async def rest() -> None:
            async for batch in iterator:
                got.append(batch.tolist())

        consumer = asyncio.ensure_future(rest())
        await asyncio.sleep(0)  # the consumer awaits its next output
        iterator.set_state(state)
        await asyncio.wait_for(consumer, 60)
    assert any(got == wanted[:m] + wanted[10:] for m in range(1, len(got) + 1))


class Scratch(MapTransform):
    """Keeps a value in `self` between two statements: safe only in a copy of one's own."""

    def __init__(self) -> None:
        self.value = 0

    def map(self, element: int) -> int:
        self.value = element
        time.sleep(0)  # let another thread run here, if one shares this object
        return self.value


@pytest.mark.parametrize("workers", WORKERS)
def test_two_iterators_of_one_loader_in_two_threads_never_share_a_transform(workers: int | str) -> None:
    """At worker_count=0 (and "auto" at its level 0) the consumer's thread runs the
    transforms: a second iterator running at the same time gets its own copy."""
    shared = loader(workers, [Scratch(), Batch(5)], n=300)
    wanted = [b.tolist() for b in loader(0, [Scratch(), Batch(5)], n=300)]
    got: list[list[list[int]]] = [[], []]
    start = threading.Barrier(2)

    def run(k: int) -> None:
        start.wait()
        got[k] = [b.tolist() for b in shared]

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert got == [wanted, wanted]


class OwnSampler:
    """A user's sampler with no `__repr__` of its own (object's holds an address)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> RecordMetadata:
        if index >= self.n:
            raise IndexError(index)
        return RecordMetadata(index=index, record_key=(index * 7) % self.n)


def test_a_state_resumes_with_a_users_sampler_that_has_no_repr() -> None:
    def make() -> DataLoader:
        return DataLoader(data_source=RangeDataSource(0, 20), sampler=OwnSampler(20), operations=[Batch(4)])

    wanted = [b.tolist() for b in make()]
    with iter(make()) as first:
        next(first)
        next(first)
        state = first.get_state()
    with iter(make()) as second:  # another sampler object: another address
        second.set_state(state)
        assert [b.tolist() for b in second] == wanted[2:]


class AsyncVerdict(FilterTransform):
    def filter(self, element: int) -> Any:
        async def verdict() -> bool:
            return element % 2 == 0

        return verdict()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_filter_that_returns_an_awaitable_is_a_type_error(workers: int) -> None:
    """An awaitable is true as an object: it kept every element."""
    with pytest.raises(TypeError, match=r"AsyncVerdict.*returned an awaitable.*only maps may be `async def`"):
        list(loader(workers, [AsyncVerdict()], n=20))


# The same for the Dataset API's iterators, whose in-order stages (a mix, a window
# shuffle, a packer) are one caller's at a time.


def mixed() -> IterDataset[int]:
    return IterDataset.mix(
        [MapDataset.range(0, 200).to_iter_dataset(), MapDataset.range(1000, 1200).to_iter_dataset()], [1, 2]
    )


@repeated
def test_two_threads_on_one_dataset_iterator_take_turns(repeat: int) -> None:
    """Before: records lost, torn or out of order (a mix run from two threads at once)."""
    wanted = list(mixed())
    got: list[list[int]] = [[], []]
    start = threading.Barrier(2)
    with iter(mixed()) as iterator:

        def take(k: int) -> None:
            start.wait()
            got[k].extend(iterator)

        threads = [threading.Thread(target=take, args=(k,)) for k in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert Counter(got[0] + got[1]) == Counter(wanted)
    order = {x: i for i, x in enumerate(wanted)}
    for share in got:
        assert share == sorted(share, key=order.__getitem__)


@pytest.mark.asyncio
async def test_two_tasks_awaiting_one_dataset_iterator_take_turns() -> None:
    """Before: the second task waited for good."""
    async with aiter(mixed()) as iterator:

        async def take() -> list[int]:
            return [x async for x in iterator]

        first, second = await asyncio.wait_for(asyncio.gather(take(), take()), 60)
    assert Counter(first + second) == Counter(list(mixed()))


def test_set_state_on_a_dataset_iterator_from_another_thread_moves_the_consumer() -> None:
    def slowly(x: int) -> int:
        time.sleep(0.0005)
        return x

    def make() -> IterDataset[int]:
        return MapDataset.range(200).to_iter_dataset().map(slowly)

    with iter(make()) as first:
        for _ in range(50):
            next(first)
        state = first.get_state()
    got: list[int] = []
    with iter(make()) as iterator:
        consumer = threading.Thread(target=lambda: got.extend(iterator))
        consumer.start()
        time.sleep(0.02)
        iterator.set_state(state)
        consumer.join(60)
    assert any(got == list(range(m)) + list(range(50, 200)) for m in range(len(got) + 1))


def draw(x: int, rng: Any) -> tuple[int, int]:
    return x, int(rng.integers(1 << 30))


@pytest.mark.parametrize(
    "build",
    [
        lambda seed: MapDataset.range(20).random_map(draw, seed=seed).to_iter_dataset(),
        lambda seed: MapDataset.range(20).to_iter_dataset().random_map(draw, seed=seed),
        lambda seed: mixed().random_map(draw, seed=seed),
    ],
    ids=["MapDataset", "in a part", "in order"],
)
def test_a_state_of_a_random_map_with_another_seed_is_refused(build: Any) -> None:
    """Another seed draws other numbers: resuming there would change the data silently."""
    with iter(build(1)) as first:
        next(first)
        state = first.get_state()
    with iter(build(2)) as second, pytest.raises(ValueError, match=r"seed|another data_source"):
        second.set_state(state)
    with iter(build(1)) as same:
        same.set_state(state)
        assert list(same) == list(build(1))[1:]


def stops_at_40(x: int) -> int:
    if x == 40:
        raise StopIteration("inside the user's map")
    time.sleep(0.001)
    return x


async def with_timeouts(iterator: Any, seconds: float) -> tuple[list[Any], BaseException | None]:
    """Every output, `anext` after `anext` under a timeout that keeps firing, and the
    error that ended them (None: the end)."""
    got: list[Any] = []
    while True:
        try:
            got.append(await asyncio.wait_for(anext(iterator), seconds))
        except TimeoutError:
            continue
        except StopAsyncIteration:
            return got, None
        except Exception as error:
            return got, error


@repeated
@pytest.mark.parametrize(
    ("operations", "kind", "count"), [([], IndexError, 60), ([stops_at_40], RuntimeError, 40)]
)
@pytest.mark.asyncio
async def test_an_error_under_timeouts_is_raised_not_lost(
    operations: list[Any], kind: type[Exception], count: int, repeat: int
) -> None:
    """A timeout that cancelled the close after an error lost the error: the next
    `anext` answered the end of the data (a source that lies, a map that raises)."""
    sampler = IndexSampler(100, num_epochs=1)
    data = DataLoader(
        data_source=ServesFewer(100, 60), sampler=sampler, operations=operations, worker_count=2
    )
    async with aiter(data) as iterator:
        got, error = await with_timeouts(iterator, 0.002)
    assert isinstance(error, kind)
    assert [int(x) for x in got] == list(range(count))


@repeated
@pytest.mark.asyncio
async def test_an_error_of_an_in_order_stage_under_timeouts_is_raised_not_lost(repeat: int) -> None:
    def boom(x: int) -> int:
        if x == 1040:
            raise ValueError("bad element")
        time.sleep(0.0005)
        return x

    dataset = mixed().map(boom)
    wanted: list[int] = []
    with pytest.raises(ValueError, match="bad element"):
        wanted.extend(dataset)
    async with aiter(dataset) as iterator:
        got, error = await with_timeouts(iterator, 0.0003)
    assert isinstance(error, ValueError)
    assert got == wanted


@pytest.mark.parametrize("part", ["workers", "early read"])
def test_an_engine_that_fails_to_start_lets_go_of_the_loaders_operations(
    part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`part` cannot start its threads: the workers (`worker_count=2`), or the early read of
    `start_prefetch()` at `worker_count=0`. The engine's claim of the loader's operations was
    never released: once the loader was gone, a later loader's operations at the same address
    looked held by another engine, and were deep-copied (a transform that waits in
    __deepcopy__ hung a test)."""
    from aioloader._iteration import threaded
    from aioloader._operations import transforms
    from aioloader._program import early

    workers, module, name = (2, threaded, "WorkerThreads") if part == "workers" else (0, early, "EarlyRead")
    loader = DataLoader(
        data_source=RangeDataSource(0, 8), sampler=IndexSampler(8, num_epochs=1), worker_count=workers
    )

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("can't start new thread")

    held = dict(transforms._claimed)
    with monkeypatch.context() as patched:
        patched.setattr(module, name, refuse)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            iter(loader).start_prefetch()
    assert transforms._claimed == held
    assert list(loader) == list(range(8))


class InterruptedWhileCopied(MapTransform):
    """A transform whose copy raises `interrupt` (a Ctrl-C in a slow `__deepcopy__`) until
    the test sets it to None."""

    def __init__(self, interrupt: type[BaseException] | None) -> None:
        self.interrupt = interrupt

    def __deepcopy__(self, memo: dict[int, Any]) -> InterruptedWhileCopied:
        if self.interrupt is not None:
            raise self.interrupt
        return InterruptedWhileCopied(None)

    def map(self, element: int) -> int:
        return element


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, ValueError])
def test_an_interrupt_while_the_workers_pattern_is_copied_lets_go_of_the_loaders_operations(
    interrupt: type[BaseException],
) -> None:
    """The consumer's thread copies the operations once when the iteration starts (the pattern
    that the workers copy): an interrupt there reaches the caller, and releases the loader's
    operations for the next iterator; an error is the copy's error, before any record runs."""
    from aioloader._operations import transforms

    transform = InterruptedWhileCopied(interrupt)
    loader = DataLoader(
        data_source=RangeDataSource(0, 64),
        sampler=IndexSampler(64, num_epochs=1),
        operations=[transform, Batch(8)],
        worker_count=2,
    )
    held = dict(transforms._claimed)
    with pytest.raises(interrupt):
        next(iter(loader))
    assert transforms._claimed == held
    transform.interrupt = None
    assert sum(len(batch) for batch in loader) == 64


class NamesWhatItCopies(MapTransform):
    """Records the id of each object that a copy is made from."""

    def __init__(self, sources: list[int]) -> None:
        self.sources = sources

    def __deepcopy__(self, memo: dict[int, Any]) -> NamesWhatItCopies:
        self.sources.append(id(self))
        return NamesWhatItCopies(self.sources)

    def map(self, element: int) -> int:
        return element


class SaysWhenWaitedFor(threading.Event):
    """An event that says when a thread starts waiting for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_for = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited_for.set()
        return super().wait(timeout)


def copy_counting_operations(sources: list[int]) -> Any:
    """A loader's operations (claimed by this caller) whose copies record what they copy."""
    operations = DataLoader(
        data_source=RangeDataSource(0, 8),
        sampler=IndexSampler(8, num_epochs=1),
        operations=[NamesWhatItCopies(sources)],
    ).operations
    own, claimed = operations.claim()
    assert own is operations
    assert claimed
    return operations


def claim_in_another_thread(operations: Any) -> tuple[threading.Thread, list[Any]]:
    """A second claim of the held `operations`, started in a thread, and waiting for the
    holder's pattern when this returns."""
    from aioloader._operations import transforms

    settled = transforms._claimed[id(operations)].settled = SaysWhenWaitedFor()
    answers: list[Any] = []
    claiming = threading.Thread(target=lambda: answers.append(operations.claim()))
    claiming.start()
    assert settled.waited_for.wait(30)
    return claiming, answers


def test_a_second_claim_waits_for_the_holders_pattern_and_copies_it() -> None:
    """Two iterators of one loader started at once: the second's claim came while the first
    was still copying its pattern, and copied the loader's own operations, which the first's
    consumer's thread then ran (a copy of a growing cache failed midway). It waits for the
    pattern, and copies it."""
    sources: list[int] = []
    operations = copy_counting_operations(sources)
    claiming, second = claim_in_another_thread(operations)
    try:
        assert claiming.is_alive()
        pattern = operations.for_worker()
        operations.settle(pattern)
        claiming.join(30)
        ((copy, second_claimed),) = second
        assert not second_claimed
        assert sources == [id(operations.before[0].target), id(pattern.before[0].target)]
        assert copy.before[0].target is not pattern.before[0].target
    finally:
        operations.settle(None)
        operations.release()
        claiming.join(30)


def test_a_released_claim_lets_a_waiting_claim_copy_the_loaders_operations() -> None:
    """An engine that fails before it settles its claim releases it: a claim waiting for its
    pattern then copies the loader's own operations (nothing runs them any more)."""
    sources: list[int] = []
    operations = copy_counting_operations(sources)
    claiming, second = claim_in_another_thread(operations)
    operations.release()
    claiming.join(30)
    assert not claiming.is_alive()
    assert second[0][1] is False
    assert sources == [id(operations.before[0].target)]

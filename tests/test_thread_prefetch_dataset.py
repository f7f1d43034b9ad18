"""`ThreadPrefetchIterDataset` and `device_put` of `grain.experimental`.

Against Grain 0.2.18 where it is installed (the GIL build of CPython 3.11; elsewhere
those tests skip): the same elements for the same pipelines with buffers of 0, 1 and
several, and `device_put`'s values. On every build: a fresh iterator given `get_state()`
after k elements, taken while the thread had read ahead, gives exactly the rest, with 0
or 2 workers below and another buffer size; the parent's errors (KeyboardInterrupt and
SystemExit too) arrive after the elements before them; `close()` from another thread and
a dropped iterator leave no thread; `device_put` places every leaf on the device or
sharding given; bad arguments and states of other pipelines are errors naming them.
"""

from __future__ import annotations

import gc
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader.experimental import ThreadPrefetchIterDataset, device_put
from tests.conftest import aioloader_threads, wait_for_no_threads
from tests.support.datasets import (
    BadArgument,
    assert_refuses_state,
    async_halves,
    draw,
    odd,
    refused_by_name,
    tenfold,
)
from tests.support.outputs import assert_same

M = aioloader.MapDataset
Build = Callable[[Any, int], Any]  # given classes (aioloader's or Grain's) and a buffer size, a dataset

MINE = SimpleNamespace(
    MapDataset=aioloader.MapDataset,
    IterDataset=aioloader.IterDataset,
    ThreadPrefetchIterDataset=ThreadPrefetchIterDataset,
)
SIZES = [0, 1, 3, 200]


def grains(grain: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(
        MapDataset=grain.MapDataset,
        IterDataset=grain.IterDataset,
        ThreadPrefetchIterDataset=grain.experimental.ThreadPrefetchIterDataset,
    )


def prefetched(g: Any, parent: Any, size: int) -> Any:
    return g.ThreadPrefetchIterDataset(parent, prefetch_buffer_size=size)


PIPELINES: dict[str, Build] = {
    "after a filter": lambda g, n: prefetched(g, g.MapDataset.range(20).to_iter_dataset().filter(odd), n),
    "of a MapDataset": lambda g, n: prefetched(g, g.MapDataset.range(9).shuffle(seed=3), n),
    "then map and batch": lambda g, n: (
        prefetched(g, g.MapDataset.range(23).to_iter_dataset(), n).map(tenfold).batch(4)
    ),
    "after seed, then random_map": lambda g, n: prefetched(
        g, g.MapDataset.range(9).seed(4).to_iter_dataset(), n
    ).random_map(draw),
    "twice, a map between": lambda g, n: prefetched(
        g, prefetched(g, g.MapDataset.range(15).to_iter_dataset(), n).map(tenfold), n
    ),
    "a mix of two": lambda g, n: g.IterDataset.mix(
        [
            prefetched(g, g.MapDataset.range(6).to_iter_dataset(), n),
            prefetched(g, g.MapDataset.range(10, 19).to_iter_dataset(), n),
        ],
        [1, 2],
    ),
    "of an empty dataset": lambda g, n: prefetched(g, g.MapDataset.range(0).to_iter_dataset(), n),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_elements_are_grains(grain: ModuleType, name: str, size: int) -> None:
    theirs = list(PIPELINES[name](grains(grain), size))
    for workers in (0, 2):
        mine = PIPELINES[name](MINE, size).prefetch(workers)
        assert_same(list(mine), theirs, f"{name}, buffer {size}, {workers} workers")


@pytest.mark.parametrize("size", [0, 2])
def test_device_put_gives_grains_values(grain: ModuleType, size: int) -> None:
    import jax

    device = jax.devices()[1]

    def build(g: Any) -> Any:
        return g.MapDataset.range(10).map(lambda i: {"x": np.arange(3) + i, "y": float(i)}).batch(3)

    theirs = list(grain.experimental.device_put(build(grain), device, device_buffer_size=size))
    mine = list(device_put(build(aioloader), device, cpu_buffer_size=size, device_buffer_size=size))
    assert len(mine) == len(theirs) == 4
    for a, b in zip(mine, theirs, strict=True):
        assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
        for leaf, expected in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
            assert leaf.devices() == expected.devices() == {device}
            assert leaf.dtype == expected.dtype
            np.testing.assert_array_equal(np.asarray(leaf), np.asarray(expected))


def test_a_negative_buffer_is_refused_as_grain_refuses_it(grain: ModuleType) -> None:
    with pytest.raises(ValueError, match="`prefetch_buffer_size` must be greater than or equal to 0"):
        prefetched(grains(grain), grain.MapDataset.range(3).to_iter_dataset(), -1)
    with pytest.raises(ValueError, match="`prefetch_buffer_size` must be greater than or equal to 0"):
        prefetched(MINE, M.range(3).to_iter_dataset(), -1)


# Read-ahead and states.


class Counted(aioloader.IterDataset[Any]):
    """A user's IterDataset (Grain's style: `__iter__` gives an iterator with a state) over
    `parent`, that counts the elements read from it: how far the thread has read ahead."""

    def __init__(self, parent: Any) -> None:
        super().__init__(parent)
        self._inner = parent
        self.iterators: list[CountedIterator] = []

    def __iter__(self) -> Any:
        self.iterators.append(CountedIterator(iter(self._inner)))
        return self.iterators[-1]


class CountedIterator:
    def __init__(self, inner: Any) -> None:
        self.inner, self.read = inner, 0

    def __next__(self) -> Any:
        item = next(self.inner)
        self.read += 1
        return item

    def get_state(self) -> Any:
        return self.inner.get_state()

    def set_state(self, state: Any) -> None:
        self.inner.set_state(state)

    def close(self) -> None:
        self.inner.close()


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def source(workers: int) -> Any:
    return M.range(40).to_iter_dataset().filter(odd).map(tenfold).prefetch(workers)


@pytest.mark.parametrize(("size", "size_after"), [(1, 3), (3, 0), (0, 2), (5, 5)])
@pytest.mark.parametrize(("workers", "workers_after"), [(0, 2), (2, 0)])
def test_the_state_after_k_elements_taken_while_the_thread_read_ahead_resumes_exactly(
    size: int, size_after: int, workers: int, workers_after: int
) -> None:
    full = [tenfold(x) for x in range(40) if odd(x)]
    for k in (0, 1, 7, len(full) - 1, len(full)):
        taken, state = taken_while_read_ahead(source(workers), size, k, len(full))
        fresh = iter(
            ThreadPrefetchIterDataset(Counted(source(workers_after)), prefetch_buffer_size=size_after)
        )
        fresh.set_state(state)
        assert taken + list(fresh) == full, f"after {k}"


def taken_while_read_ahead(parent: Any, size: int, k: int, length: int) -> tuple[list[Any], str]:
    """The first `k` elements and the state after them (as JSON), taken once the thread
    had read `size` more (and one in hand, waiting for room), or to the end."""
    counted = Counted(parent)
    iterator = iter(ThreadPrefetchIterDataset(counted, prefetch_buffer_size=size))
    taken = list(itertools.islice(iterator, k))
    iterator.start_prefetch()  # for k = 0: the thread starts at the first `next()` else
    ahead = min(k + size + (size > 0), length)
    wait_until(lambda: counted.iterators[0].read >= ahead, f"{ahead} elements read")
    state = json.dumps(iterator.get_state())
    iterator.close()
    return taken, state


RESUMED: dict[str, Callable[[int, int], Any]] = {
    "a part below": lambda n, w: prefetched(MINE, M.range(12).to_iter_dataset().prefetch(w), n),
    "a filter below, a batch after": lambda n, w: prefetched(
        MINE, M.range(30).to_iter_dataset().filter(odd).prefetch(w), n
    ).batch(4),
    "twice": lambda n, w: prefetched(
        MINE, prefetched(MINE, M.range(9).to_iter_dataset().prefetch(w), n).map(tenfold), n
    ),
    "in a mix": lambda n, w: aioloader.IterDataset.mix(
        [prefetched(MINE, M.range(5).to_iter_dataset(), n), M.range(10, 17).to_iter_dataset()]
    ).prefetch(w),
    "after seed, then random_map": lambda n, w: prefetched(
        MINE, M.range(8).seed(3).to_iter_dataset().prefetch(w), n
    ).random_map(draw),
}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_a_fresh_iterator_given_the_state_after_any_element_gives_the_rest(name: str) -> None:
    build = RESUMED[name]
    full = list(build(0, 0))
    for k in range(len(full) + 1):
        for (size, workers), (size_after, workers_after) in [((2, 0), (0, 2)), ((0, 2), (3, 0))]:
            iterator = iter(build(size, workers))
            taken = list(itertools.islice(iterator, k))
            state = json.dumps(iterator.get_state())
            iterator.close()
            fresh = iter(build(size_after, workers_after))
            fresh.set_state(state)
            assert_same(taken + list(fresh), full, f"{name}: resumed after {k}")


def test_async_iteration_gives_the_same_elements_and_state() -> None:
    ds = prefetched(MINE, M.range(12).to_iter_dataset().filter(odd).prefetch(2), 2)

    first, rest = async_halves(ds)
    assert first + rest == list(ds) == [1, 3, 5, 7, 9, 11]


def test_get_state_of_a_fresh_iterator_starts_no_thread_and_start_prefetch_does() -> None:
    counted = Counted(M.range(5).to_iter_dataset())
    iterator = iter(ThreadPrefetchIterDataset(counted, prefetch_buffer_size=2))
    state = iterator.get_state()
    time.sleep(0.05)
    assert not [t for t in aioloader_threads() if t.name.startswith("aioloader-thread-prefetch")]
    iterator.start_prefetch()
    wait_until(lambda: counted.iterators[0].read == 3, "the read-ahead")  # 2 waiting, 1 in hand
    assert iterator.get_state() == state  # the consumer took nothing yet
    assert list(iterator) == [0, 1, 2, 3, 4]


def test_an_ended_iterator_stays_ended_and_its_state_resumes_to_nothing() -> None:
    ds = prefetched(MINE, M.range(4).to_iter_dataset(), 2)
    iterator = iter(ds)
    assert list(iterator) == [0, 1, 2, 3]
    assert list(iterator) == []
    fresh = iter(ds)
    fresh.set_state(iterator.get_state())
    assert list(fresh) == []


OTHER_STATES = [
    ("into the plain part", prefetched(MINE, M.range(5), 2), M.range(5).to_iter_dataset()),
    ("from the plain part", M.range(5).to_iter_dataset(), prefetched(MINE, M.range(5), 2)),
    ("of another range", prefetched(MINE, M.range(5), 2), prefetched(MINE, M.range(6), 2)),
    ("into a limit", prefetched(MINE, M.range(5), 1), aioloader.experimental.LimitIterDataset(M.range(5), 3)),
]


@pytest.mark.parametrize(("label", "source", "target"), OTHER_STATES, ids=[c[0] for c in OTHER_STATES])
def test_a_state_of_another_pipeline_is_a_value_error(label: str, source: Any, target: Any) -> None:
    assert_refuses_state(source, target)


# Errors.


class Failing(Exception):
    pass


def raise_at(position: int, error: Callable[[], BaseException]) -> Callable[[int], int]:
    def transform(x: int) -> int:
        if x == position:
            raise error()
        return x

    return transform


def drain(iterator: Iterator[Any], kind: type[BaseException]) -> tuple[list[Any], BaseException]:
    got: list[Any] = []
    with pytest.raises(kind) as caught:
        got.extend(iterator)  # what came before the error stays in `got`
    return got, caught.value


@pytest.mark.parametrize("size", [1, 3, 50])
@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_arrives_after_the_elements_before_it_with_its_type(size: int, workers: int) -> None:
    parent = M.range(20).to_iter_dataset().map(raise_at(6, lambda: Failing("six"))).prefetch(workers)
    iterator = iter(prefetched(MINE, parent, size))
    got, error = drain(iterator, Failing)
    assert got == [0, 1, 2, 3, 4, 5]
    assert str(error) == "six"
    assert next(iterator, "ended") == "ended"


class Raising(aioloader.IterDataset[int]):
    """A user's IterDataset whose iterator raises `error()` as its element `at`."""

    def __init__(self, at: int, error: Callable[[], BaseException]) -> None:
        super().__init__()
        self._at, self._error = at, error

    def __iter__(self) -> Any:
        return RaisingIterator(self._at, self._error)


class RaisingIterator:
    def __init__(self, at: int, error: Callable[[], BaseException]) -> None:
        self._at, self._error, self._next = at, error, 0

    def __next__(self) -> int:
        if self._next == self._at:
            raise self._error()
        self._next += 1
        return self._next - 1

    def get_state(self) -> dict[str, int]:
        return {"next": self._next}

    def set_state(self, state: dict[str, int]) -> None:
        self._next = state["next"]


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("size", [1, 4])
def test_a_keyboard_interrupt_or_system_exit_in_the_thread_reaches_the_consumer(
    kind: type[BaseException], size: int
) -> None:
    iterator = iter(prefetched(MINE, Raising(3, lambda: kind("from the thread")), size))
    got, error = drain(iterator, kind)
    assert got == [0, 1, 2]
    assert str(error) == "from the thread"
    assert iterator.get_state()["dataset"] == {
        "stage": "thread_prefetch",
        "parent": {"stage": "iterator", "state": {"next": 3}},
    }


# Closing.


def endless(size: int) -> tuple[Counted, Any]:
    counted = Counted(M.range(5).repeat().to_iter_dataset())
    return counted, iter(prefetched(MINE, counted, size))


def close_elsewhere(iterator: Any) -> None:
    closer = threading.Thread(target=iterator.close, name="test-closer")
    closer.start()
    closer.join(5)
    assert not closer.is_alive()


@pytest.mark.parametrize("size", [1, 3])
def test_close_from_another_thread_while_the_thread_waits_for_room(size: int) -> None:
    counted, iterator = endless(size)
    assert next(iterator) == 0
    wait_until(lambda: counted.iterators[0].read == 1 + size + 1, "a full buffer")
    time.sleep(0.02)
    assert counted.iterators[0].read == 1 + size + 1  # it waits for room, reading nothing
    close_elsewhere(iterator)
    assert wait_for_no_threads() == []
    assert next(iterator, "ended") == "ended"
    fresh = iter(prefetched(MINE, Counted(M.range(5).repeat().to_iter_dataset()), 2))
    fresh.set_state(iterator.get_state())  # the state is still the consumer's: after 1 element
    assert [next(fresh) for _ in range(3)] == [1, 2, 3]
    fresh.close()


class Waiting(aioloader.IterDataset[int]):
    """A user's IterDataset whose iterator waits until it is closed, then ends."""

    def __init__(self) -> None:
        super().__init__()
        self.iterators: list[WaitingIterator] = []

    def __iter__(self) -> Any:
        self.iterators.append(WaitingIterator())
        return self.iterators[-1]


class WaitingIterator:
    def __init__(self) -> None:
        self.entered, self.closed = threading.Event(), threading.Event()

    def __next__(self) -> int:
        self.entered.set()
        self.closed.wait(10)
        raise StopIteration

    def get_state(self) -> dict[str, int]:
        return {}

    def set_state(self, state: dict[str, int]) -> None:
        pass

    def close(self) -> None:
        self.closed.set()


def test_close_from_another_thread_while_the_consumer_waits_ends_its_next() -> None:
    waiting = Waiting()
    iterator = iter(prefetched(MINE, waiting, 2))
    outcome: list[Any] = []
    consumer = threading.Thread(target=lambda: outcome.append(next(iterator, "ended")), name="test-consumer")
    consumer.start()
    wait_until(waiting.iterators[0].entered.is_set, "the thread inside the parent")
    time.sleep(0.02)  # the consumer waits for the hand-off
    close_elsewhere(iterator)
    consumer.join(5)
    assert outcome == ["ended"]
    assert wait_for_no_threads() == []


@pytest.mark.parametrize("size", [1, 3])
def test_a_dropped_iterator_leaves_no_thread(size: int) -> None:
    counted, iterator = endless(size)
    assert [next(iterator), next(iterator)] == [0, 1]
    wait_until(lambda: counted.iterators[0].read == 2 + size + 1, "a full buffer")
    del iterator
    gc.collect()
    assert wait_for_no_threads() == []


def test_closing_twice_and_closing_a_fresh_iterator_are_fine() -> None:
    counted, iterator = endless(2)
    iterator.close()
    iterator.close()
    assert next(iterator, "ended") == "ended"
    assert counted.iterators[0].read == 0


# device_put.


def batches() -> Any:
    return M.range(12).map(lambda i: {"x": np.arange(4, dtype=np.float32) + i, "i": np.int32(i)}).batch(4)


def assert_on(batch: Any, expected: Any, where: Callable[[Any], bool]) -> None:
    import jax

    assert jax.tree_util.tree_structure(batch) == jax.tree_util.tree_structure(expected)
    for leaf, value in zip(
        jax.tree_util.tree_leaves(batch), jax.tree_util.tree_leaves(expected), strict=True
    ):
        assert isinstance(leaf, jax.Array)
        assert where(leaf)
        np.testing.assert_array_equal(np.asarray(leaf), value)


@pytest.mark.parametrize(("cpu", "ahead"), [(4, 2), (0, 0), (1, 5)])
def test_device_put_places_every_leaf_on_the_device(cpu: int, ahead: int) -> None:
    import jax

    device = jax.devices()[3]
    expected = list(batches())
    got = list(device_put(batches(), device, cpu_buffer_size=cpu, device_buffer_size=ahead))
    assert len(got) == len(expected) == 3
    for batch, value in zip(got, expected, strict=True):
        assert_on(batch, value, lambda leaf: leaf.devices() == {device})


def test_device_put_takes_a_sharding() -> None:
    import jax

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[2])
    for batch, value in zip(device_put(batches(), sharding), batches(), strict=True):
        assert_on(batch, value, lambda leaf: leaf.sharding == sharding)


def test_device_put_resumes_and_may_be_transformed_further() -> None:
    import jax

    device = jax.devices()[1]
    ds = device_put(batches().to_iter_dataset().prefetch(2), device).map(lambda b: b["i"] * 2)
    iterator = iter(ds)
    first = next(iterator)
    state = json.dumps(iterator.get_state())
    iterator.close()
    fresh = iter(ds)
    fresh.set_state(state)
    got = [first, *fresh]
    assert [np.asarray(x).tolist() for x in got] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18, 20, 22]]
    assert all(x.devices() == {device} for x in got)


def test_a_failed_transfer_arrives_in_order_with_jaxs_error() -> None:
    import jax

    ds = device_put(M.range(6).map(lambda i: "text" if i == 2 else np.int32(i)), jax.devices()[0])
    got, error = drain(iter(ds), TypeError)  # JAX's, for a leaf it cannot place
    assert [int(x) for x in got] == [0, 1]
    assert "PutOnDevice" in "\n".join(getattr(error, "__notes__", []))


# Bad arguments.


def part() -> Any:
    return M.range(3).to_iter_dataset()


BAD_ARGUMENTS: list[BadArgument] = [
    (
        lambda: ThreadPrefetchIterDataset(part(), prefetch_buffer_size=-1),
        ValueError,
        r"`prefetch_buffer_size`",
    ),
    (
        lambda: ThreadPrefetchIterDataset(part(), prefetch_buffer_size=1.5),
        TypeError,
        r"`prefetch_buffer_size`",
    ),
    (
        lambda: ThreadPrefetchIterDataset(part(), prefetch_buffer_size=True),
        TypeError,
        r"`prefetch_buffer_size`",
    ),
    (
        lambda: ThreadPrefetchIterDataset(part(), prefetch_buffer_size="2"),
        TypeError,
        r"`prefetch_buffer_size`",
    ),
    (
        lambda: ThreadPrefetchIterDataset(part(), prefetch_buffer_size=None),
        TypeError,
        r"`prefetch_buffer_size`",
    ),
    (lambda: ThreadPrefetchIterDataset([1, 2], prefetch_buffer_size=1), TypeError, r"`parent` must be"),
    (lambda: ThreadPrefetchIterDataset(5, prefetch_buffer_size=1), TypeError, r"`parent` must be"),
    (lambda: ThreadPrefetchIterDataset(part(), 2), TypeError, r"positional"),
    (
        lambda: ThreadPrefetchIterDataset(part().device_put(), prefetch_buffer_size=1),
        ValueError,
        r"`device_put` must be the last",
    ),
    (lambda: device_put(part(), None, cpu_buffer_size=-1), ValueError, r"`cpu_buffer_size`"),
    (lambda: device_put(part(), None, device_buffer_size="2"), TypeError, r"`device_buffer_size`"),
    (lambda: device_put(part(), None, device_buffer_size=-3), ValueError, r"`device_buffer_size`"),
    (lambda: device_put(None, None), TypeError, r"`ds` must be"),
    (lambda: device_put([1, 2], None), TypeError, r"`ds` must be"),
]


test_a_bad_argument_is_an_error_naming_it = refused_by_name(BAD_ARGUMENTS)


def test_a_numpy_buffer_size_is_taken() -> None:
    ds = ThreadPrefetchIterDataset(part(), prefetch_buffer_size=np.int64(2))
    assert list(ds) == [0, 1, 2]
    assert "prefetch_buffer_size=2" in repr(ds)


class LiveState(aioloader.IterDataset[int]):
    """A user's IterDataset whose iterator's `get_state()` returns its live state dict (Grain's
    ThreadPrefetch deep-copies each state its thread takes, so this works there)."""

    def __init__(self) -> None:
        super().__init__()
        self.iterators: list[LiveStateIterator] = []

    def __iter__(self) -> Any:
        self.iterators.append(LiveStateIterator())
        return self.iterators[-1]


class LiveStateIterator:
    def __init__(self) -> None:
        self.state = {"next": 0}

    def __next__(self) -> int:
        if self.state["next"] >= 10:
            raise StopIteration
        self.state["next"] += 1
        return self.state["next"] - 1

    def get_state(self) -> dict[str, int]:
        return self.state

    def set_state(self, state: dict[str, int]) -> None:
        self.state = dict(state)


def test_a_user_iterator_returning_its_live_state_resumes_at_the_consumers_element() -> None:
    live = LiveState()
    iterator = iter(prefetched(MINE, live, 3))
    assert [next(iterator), next(iterator)] == [0, 1]
    wait_until(lambda: live.iterators[0].state["next"] > 2, "the thread reading on")
    state = iterator.get_state()
    iterator.close()
    assert state["dataset"]["parent"]["state"] == {"next": 2}

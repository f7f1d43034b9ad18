"""A review of `multithread_prefetch`, `ThreadPrefetchIterDataset`, the dataset options and
`assert_equal_output_after_checkpoint` on hostile inputs, against Grain 0.2.18 where it
defines the answer (those tests skip where Grain is not installed).

Found by the review: a thread count past the loader's 256 was taken and refused only at
the first `next()`, naming `worker_count` instead of `num_threads`; a NumPy float32 ratio
that a filter's window reaches exactly (300 of 1000 dropped against np.float32(0.3))
raised in Grain and not here; and the checkpoint check passed a pipeline whose resumed
elements had another dtype (1 == 1.0 for `np.testing.assert_equal`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader.experimental import (
    DatasetOptions,
    ThreadPrefetchIterDataset,
    WithOptionsIterDataset,
    assert_equal_output_after_checkpoint,
    multithread_prefetch,
)

Wrap = Callable[[Any], Any]  # a dataset around a parent
WRAPS: dict[str, Wrap] = {
    "thread prefetch 0": lambda ds: ThreadPrefetchIterDataset(ds, prefetch_buffer_size=0),
    "thread prefetch 3": lambda ds: ThreadPrefetchIterDataset(ds, prefetch_buffer_size=3),
    "multithread 1": lambda ds: multithread_prefetch(ds, 1, 2),
    "multithread 3": lambda ds: multithread_prefetch(ds, 3, 1),
    "thread prefetch over multithread": lambda ds: ThreadPrefetchIterDataset(
        multithread_prefetch(ds, 2, 2), prefetch_buffer_size=2
    ),
}


# Arguments.
def test_more_threads_than_a_loader_starts_are_refused_at_once_by_their_name() -> None:
    ds = al.MapDataset.range(5).to_iter_dataset()
    with pytest.raises(ValueError, match=r"`num_threads` must be at most 256 .*got 257"):
        multithread_prefetch(ds, 257, 1)
    with pytest.raises(ValueError, match=r"`worker_count` must be at most 256 .*got 1000000"):
        ds.prefetch(10**6)
    with pytest.raises(ValueError, match=r"`worker_count` must be at most 256 .*got 300"):
        ds.mp_prefetch(al.MultiprocessingOptions(num_workers=300))
    multithread_prefetch(ds, 256, 10**6)  # the most is taken (not iterated: 256 threads)


def test_sequential_slice_takes_numpy_bools_as_every_bool_argument_does() -> None:
    ds = al.MapDataset.range(7).to_iter_dataset()
    assert list(multithread_prefetch(ds, 2, 1, sequential_slice=np.bool_(True))) == list(range(7))
    with pytest.raises(TypeError, match="`sequential_slice` must be a bool"):
        multithread_prefetch(ds, 2, 1, sequential_slice=1)


# Errors in a map before the prefetch, at element K.
K = 5


class RaiseAt:
    """A map raising `kind` at element K (module level: copied for worker threads)."""

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    def __call__(self, x: int) -> int:
        if x == K:
            raise self.kind(f"at {K}")
        return x


def drain(ds: Any) -> tuple[list[int], BaseException | None]:
    got: list[int] = []
    iterator = iter(ds)
    try:
        for element in iterator:
            got.append(element)
    except BaseException as error:  # KeyboardInterrupt and SystemExit too: they are the data here
        return got, error
    return got, None


def failing(g: Any, kind: type[BaseException]) -> Any:
    return g.MapDataset.range(12).to_iter_dataset().map(RaiseAt(kind))


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_value_error_comes_after_every_element_before_it(wrap: str) -> None:
    got, error = drain(WRAPS[wrap](failing(al, ValueError)))
    assert got == list(range(K))
    assert isinstance(error, ValueError)
    assert str(error) == f"at {K}"


@pytest.mark.parametrize("wrap", ["thread prefetch 0", "thread prefetch 3", "multithread 1", "multithread 3"])
def test_a_value_error_is_grains(grain: ModuleType, wrap: str) -> None:
    x = grain.experimental
    theirs = {
        "thread prefetch 0": lambda ds: x.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=0),
        "thread prefetch 3": lambda ds: x.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=3),
        "multithread 1": lambda ds: x.multithread_prefetch(ds, 1, 2),
        "multithread 3": lambda ds: x.multithread_prefetch(ds, 3, 1),
    }[wrap]
    got, error = drain(theirs(failing(grain, ValueError)))
    assert (got, type(error)) == (list(range(K)), ValueError)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_stop_iteration_in_a_map_is_an_error_not_the_end(wrap: str) -> None:
    """Grain's iterators end there, as if the data were done (and its 3 threads then lose
    the rest of one slice only); here a RuntimeError from it, after the elements before."""
    got, error = drain(WRAPS[wrap](failing(al, StopIteration)))
    assert got == list(range(K))
    assert isinstance(error, RuntimeError)
    assert "raised StopIteration" in str(error)
    assert isinstance(error.__cause__, StopIteration)


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_an_interrupt_arrives_as_itself_after_an_ordered_prefix(wrap: str, kind: type[BaseException]) -> None:
    """Documented: an interrupt stops the loader at once, so fewer than K elements may come
    first; those that do are the first ones, in order, each once."""
    got, error = drain(WRAPS[wrap](failing(al, kind)))
    assert type(error) is kind
    assert str(error) == f"at {K}"
    assert got == list(range(len(got)))
    assert len(got) <= K


# States.
def filtered() -> Any:
    return al.MapDataset.range(13).to_iter_dataset().filter(lambda x: x % 3 != 1).map(lambda x: x * 10)


def resumed(ds: Any, state: Any, started: int) -> list[Any]:
    """The rest of `ds` from `state`, set on an iterator that took `started` elements first."""
    iterator = iter(ds)
    for _ in range(started):
        next(iterator)
    iterator.set_state(state)
    return list(iterator)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_every_state_resumes_fresh_and_started_iterators(wrap: str) -> None:
    ds = WRAPS[wrap](filtered())
    full = list(ds)
    assert full == list(filtered())
    iterator = iter(ds)
    for k in range(len(full) + 1):  # 0 and the end included
        state = iterator.get_state()
        for started in (0, 1, len(full)):
            assert resumed(ds, state, started) == full[k:], (k, started)
        next(iterator, None)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_state_after_an_error_resumes_at_the_failed_element(wrap: str) -> None:
    flaky = Flaky()
    ds = WRAPS[wrap](al.MapDataset.range(8).to_iter_dataset().map(flaky))
    got, error = drain(ds)
    iterator_state = _state_after_error(ds)
    flaky.broken = False
    assert (got, type(error)) == ([0, 1, 2, 3], ValueError)
    assert resumed(ds, iterator_state, 0) == [4, 5, 6, 7]


class Flaky:
    """Fails at element 4 until mended."""

    broken = True

    def __call__(self, x: int) -> int:
        if x == 4 and self.broken:
            raise ValueError("four")
        return x


def _state_after_error(ds: Any) -> Any:
    iterator = iter(ds)
    with pytest.raises(ValueError, match="four"):
        list(iterator)
    return iterator.get_state()


# Two consumers at once.
@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_two_iterators_of_one_dataset_in_two_threads_each_get_everything(wrap: str) -> None:
    ds = WRAPS[wrap](
        al.MapDataset.range(300).to_iter_dataset().filter(lambda x: x % 7 != 0).map(lambda x: x * 3)
    )
    expected = list(ds)
    outputs: list[list[Any]] = [[], []]
    threads = [
        threading.Thread(target=outputs[i].extend, args=(ds,), name=f"test-consumer-{i}") for i in (0, 1)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert outputs == [expected, expected]


# Filter thresholds.
class DropTenth:
    """Drops `drop` of every 10 elements."""

    def __init__(self, drop: int) -> None:
        self.drop = drop

    def __call__(self, x: int) -> bool:
        return x % 10 >= self.drop


def checked(g: Any, ratio: Any, workers: int | None, batch: bool) -> Any:
    ds = g.MapDataset.range(3000).to_iter_dataset().filter(DropTenth(3))
    ds = ds if workers is None else ds.prefetch(workers)
    ds = ds.batch(7) if batch else ds
    options = g.experimental.DatasetOptions(filter_raise_threshold_ratio=ratio)
    return g.experimental.WithOptionsIterDataset(ds, options)


@pytest.mark.parametrize("ratio", [0.3, np.float32(0.3), np.float64(0.3), np.float16(0.3)], ids=repr)
@pytest.mark.parametrize("workers", [None, 2])
@pytest.mark.parametrize("batch", [False, True])
def test_a_window_exactly_at_a_numpy_ratio_raises(ratio: Any, workers: int | None, batch: bool) -> None:
    """300 of 1000 dropped reaches 0.3 however it is given; Grain compares with the ratio as
    given (in float32 for a float32 under NumPy 2), so a float() of it (0.3000000119) did not."""
    got, error = drain(checked(al, ratio, workers, batch))
    assert len(got) == (99 if batch else 699)
    assert isinstance(error, ValueError)
    assert "skipped 30.00 % of the last seen 1000" in str(error)


@pytest.mark.parametrize("ratio", [0.3, np.float32(0.3), np.float16(0.3)], ids=repr)
def test_a_window_exactly_at_a_numpy_ratio_is_grains(grain: ModuleType, ratio: Any) -> None:
    got, error = drain(checked(grain, ratio, None, False))
    assert (len(got), type(error)) == (699, ValueError)


def test_a_numpy_ratio_is_kept_as_given_and_merges() -> None:
    options = DatasetOptions(filter_raise_threshold_ratio=np.float32(0.3))
    assert type(options.filter_raise_threshold_ratio) is np.float32
    assert options.merge(DatasetOptions(filter_raise_threshold_ratio=0.9)) == options
    with pytest.raises(ValueError, match="`filter_raise_threshold_ratio` must be None or a number from 0"):
        DatasetOptions(filter_raise_threshold_ratio=np.float32(1.5))


# The checkpoint check.
class Rescaled(al.IterDataset[Any]):
    """Arrays `i * scale`, its position restored, but `scale` as a float (as from JSON)."""

    def __iter__(self) -> Any:
        return RescaledIterator()


class RescaledIterator(al.DatasetIterator[Any]):
    def __init__(self) -> None:
        super().__init__()
        self._next: int = 0
        self._scale: int | float = 2

    def __next__(self) -> Any:
        if self._next >= 4:
            raise StopIteration
        self._next += 1
        return {"x": np.arange(3) * self._scale, "i": self._next}

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next}

    def set_state(self, state: dict[str, Any]) -> None:
        self._next, self._scale = state["next"], 2.0


def test_the_checkpoint_check_fails_a_pipeline_whose_dtype_changes_after_resuming() -> None:
    message = r"element 0, resumed at step 0, differs: float64\[3\] instead of int64\[3\]"
    with pytest.raises(AssertionError, match=message):
        assert_equal_output_after_checkpoint(Rescaled())
    with pytest.raises(AssertionError, match="element 0, resumed at step 0, differs: float64"):
        assert_equal_output_after_checkpoint(ThreadPrefetchIterDataset(Rescaled(), prefetch_buffer_size=2))


def test_the_checkpoint_check_fails_a_pipeline_whose_values_change_after_resuming() -> None:
    flips = al.MapDataset.range(6).to_iter_dataset().map(Flip())
    with pytest.raises(AssertionError, match="the elements after the state of step 0 differ"):
        assert_equal_output_after_checkpoint(multithread_prefetch(flips, 2, 1))


class Flip:
    """Counts its calls: a resumed run sees other counts (state outside the pipeline's)."""

    def __init__(self) -> None:
        self.calls = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> Flip:
        return self  # shared by the worker threads: the count is the point

    def __call__(self, x: int) -> int:
        self.calls += 1
        return x + 100 * (self.calls > 6)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_the_checkpoint_check_passes_prefetched_and_checked_pipelines(wrap: str) -> None:
    options = DatasetOptions(filter_raise_threshold_ratio=np.float32(0.9), filter_warn_threshold_ratio=None)
    ds = WithOptionsIterDataset(WRAPS[wrap](filtered()), options).batch(2)
    assert_equal_output_after_checkpoint(ds)
    assert_equal_output_after_checkpoint(
        WRAPS[wrap](
            al.MapDataset.range(9)
            .map(lambda x: {"a": np.full((2,), x), "b": (x, float(x))})
            .to_iter_dataset()
        )
    )

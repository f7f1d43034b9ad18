"""How a pipeline runs: `prefetch` (worker threads for the parallel parts) and `device_put`.

Neither changes the elements. `prefetch(n)` sets how every parallel part upstream runs
(`n` worker threads each, and the executor), unless a `prefetch` nearer to it says
otherwise; maps and filters after it still join the part before it. `device_put` is
the last transformation: `iter()` puts each output on the accelerator, in the engine's
device thread when the pipeline is one parallel part, else in the thread that runs the
pipeline ahead of the consumer (see `iterator`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from aioloader._common.validation import require_bool, require_int
from aioloader._dataset.iter_base import IterDataset
from aioloader._dataset.stages import Plan, Settings
from aioloader._device.device_put import DevicePut
from aioloader._loader import require_thread_count

T = TypeVar("T")

EXECUTORS = ("thread", "interpreter")


class PrefetchIterDataset(IterDataset[T]):
    """The parent's elements, its parallel parts run on `worker_count` threads each."""

    def __init__(self, parent: IterDataset[T], worker_count: Any, executor: str) -> None:
        super().__init__(parent)
        self._parent = parent
        if hasattr(worker_count, "num_workers"):  # Grain's MultiprocessingOptions, or ours
            worker_count = worker_count.num_workers
        self._settings = Settings(require_thread_count("worker_count", worker_count), executor)
        if executor not in EXECUTORS:
            raise ValueError(f"`executor` must be one of {EXECUTORS}, got {executor!r}.")

    def _plan(self, settings: Settings) -> Plan:
        plan: Plan = self._parent._plan(dataclasses.replace(self._settings, options=settings.options))
        return plan

    def __repr__(self) -> str:
        s = self._settings
        return f"{self._parent!r}.prefetch({s.worker_count}, executor={s.executor!r})"


class DevicePutIterDataset(IterDataset[Any]):
    """The parent's elements on the accelerator; nothing may follow it."""

    _last = True

    def __init__(self, parent: IterDataset[Any], device_put: DevicePut) -> None:
        super().__init__(parent)
        if not isinstance(device_put, DevicePut):
            raise TypeError(f"`device_put` must be a DevicePut or None, got {device_put!r}.")
        self.parent, self.device = parent, device_put

    def _plan(self, settings: Settings) -> Plan:
        raise AssertionError("an iterator runs the parent of `device_put` and transfers its outputs")

    def __repr__(self) -> str:
        return f"{self.parent!r}.device_put({self.device!r})"


def multithread_prefetch(
    ds: IterDataset[T], num_threads: int, buffer_size: int, sequential_slice: bool = False
) -> IterDataset[T]:
    """Grain's `multithread_prefetch`: `ds.prefetch(num_threads)` (`ds` itself for 0).

    Grain's shards the dataset into a slice per thread and interleaves them, so its order
    may change with `num_threads` where filters drop elements; here the threads share the
    chunks of one stream and the order never changes. `buffer_size` (Grain's per thread)
    and `sequential_slice` are checked and change nothing: each part reads ahead within
    its `ReadOptions`.
    """
    if not isinstance(ds, IterDataset):
        raise TypeError(f"`ds` must be an IterDataset, got {type(ds).__name__}.")
    threads = require_thread_count("num_threads", num_threads)
    require_int("buffer_size", buffer_size, minimum=0)
    require_bool("sequential_slice", sequential_slice)  # NumPy's too, as elsewhere
    return ds.prefetch(threads) if threads else ds

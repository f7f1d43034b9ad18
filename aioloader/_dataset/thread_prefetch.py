"""`ThreadPrefetchIterDataset(parent, *, prefetch_buffer_size)` and `device_put(ds, device, *,
cpu_buffer_size=4, device_buffer_size=2)`: Grain's `grain.experimental` read-ahead on a thread.

`ThreadPrefetchIterDataset` gives the parent's elements, in order, while a thread of its
own (`aioloader-thread-prefetch-{n}`) reads the parent ahead of the consumer: up to
`prefetch_buffer_size` elements wait for it (and one more may be in the thread's hand,
waiting for room), as in Grain. The thread starts at the first `next()` or at
`start_prefetch()`, never before: `get_state()` on a fresh iterator reads nothing. With
`prefetch_buffer_size=0` there is no thread: the consumer reads the parent itself, as in
Grain. The parent's errors, any `BaseException` (a KeyboardInterrupt or SystemExit raised
in the thread too), reach the consumer once every element before them was taken, with
their own type and traceback; the stage then ends. `close()`, from any thread, stops the
reading (a thread waiting for room lets go at once), closes the parent and joins the
thread; a stage dropped without `close()` stops its thread when collected.

The state is `{"stage": "thread_prefetch", "parent": <the parent's state>}` at the last
element the consumer took, whatever the thread has read since: each element crosses with
the parent's snapshot after it, as in `iterator.Background`. It does not depend on the
buffer size, so a state resumes with another buffer size, and with another worker count
of a `prefetch(n)` below.

`device_put(ds, device)` is Grain's composition, node for node (so that seeds derived
downstream equal Grain's): a thread prefetch of `cpu_buffer_size` elements, a map of
`jax.device_put(element, device)` (`device`: anything `jax.device_put` takes, a Device
or a Sharding), then a thread prefetch of `device_buffer_size` transferred elements. The
result is an IterDataset like any other. JAX is imported when `device_put` is called.

Deliberate differences from Grain:

* the state is aioloader's JSON dict naming the stage, so that a state of another
  pipeline is a ValueError (Grain's is the parent's state as it is);
* `prefetch_buffer_size` must be an int, not a bool nor Grain's autotune parameter;
* `start_prefetch()` with a buffer of 0 starts the parallel parts below and no thread
  (Grain's then starts one whose queue, of size 0, is unbounded);
* after the parent's error the stage ends (Grain's next call reads the parent again);
  a DatasetIterator is closed after an error anyway;
* `device_put` maps `jax.device_put`, not aioloader's `IterDataset.device_put(DevicePut)`:
  that one must be the last transformation, takes only a Sharding and a buffer of at
  least 1, while Grain's result may be transformed further and its buffers may be 0.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.iterator import join_producer, start_producer
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, state_fields
from aioloader._device.handoff import Handoff

T = TypeVar("T")


class ThreadPrefetchIterDataset(IterDataset[T]):
    """The parent's elements, read up to `prefetch_buffer_size` ahead by a thread."""

    def __init__(self, parent: IterDataset[T] | MapDataset[T], *, prefetch_buffer_size: int) -> None:
        # Checked first: `IterDataset.__init__` would take a list for a sequence of parents.
        self._parent: IterDataset[T] = require_iter_dataset("parent", parent)
        super().__init__(parent)  # as given: seeds derived by `seed()` upstream equal Grain's
        self._buffer_size = require_int("prefetch_buffer_size", prefetch_buffer_size, minimum=0)

    def _plan(self, settings: Settings) -> Plan:
        parent = as_stage(self._parent._plan(settings))
        if self._buffer_size == 0:
            return PassThroughStage(parent)
        return ThreadPrefetchStage(parent, self._buffer_size)

    def __repr__(self) -> str:
        return f"ThreadPrefetchIterDataset({self._parent!r}, prefetch_buffer_size={self._buffer_size})"


class PassThroughStage(Stage[Any]):
    """A thread prefetch with a buffer of 0: the consumer reads the parent itself."""

    def __init__(self, parent: Stage[Any]) -> None:
        super().__init__((parent,))
        self._parent = parent

    def __next__(self) -> Any:
        return next(self._parent)

    def snapshot(self) -> Any:
        return self._parent.snapshot()

    def state_of(self, token: Any) -> dict[str, Any]:
        return {"stage": "thread_prefetch", "parent": self._parent.state_of(token)}

    def set_state(self, state: dict[str, Any]) -> None:
        (parent,) = state_fields(state, "thread_prefetch", ("parent",))
        self._parent.set_state(parent)


class ThreadPrefetchStage(PassThroughStage):
    """The thread prefetch running: a thread reads the parent into a hand-off of
    `buffer_size` elements, each with the parent's snapshot after it."""

    def __init__(self, parent: Stage[Any], buffer_size: int) -> None:
        super().__init__(parent)
        self._handoff: Handoff[tuple[Any, Any] | BaseException] = Handoff(buffer_size)
        self._token: Any = parent.snapshot()  # the parent after the last element the consumer took
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # a `close()` from another thread against the thread's start
        self._closed = False
        self._failed = False
        # The thread holds the parent and the hand-off, never this stage: when the stage is
        # dropped unclosed, this stops the thread (and `close()` calls it, once).
        self._stopper = weakref.finalize(self, _stop, self._handoff, parent)

    def __next__(self) -> Any:
        self._start()
        found = self._handoff.get()
        if isinstance(found, BaseException):
            self._failed = True  # the state stays before the element that failed
            raise found
        if found is None:
            self._at_end()
            raise StopIteration
        item, self._token = found
        return item

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            # `iterator.Background`'s loop: elements and errors, in order.
            self._thread = start_producer(self._parent, None, self._handoff, "aioloader-thread-prefetch")

    def _at_end(self) -> None:
        """The hand-off is over: the parent ended, failed, or a `close()` cut it short."""
        if self._closed or self._failed:
            return  # the state stays at the last element taken
        self._join()  # the thread has left the parent: its snapshot is the end's
        self._token = self._parent.snapshot()

    def snapshot(self) -> Any:
        return self._token

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # a fresh stage: the thread has not started
        self._token = self._parent.snapshot()

    def start_prefetch(self) -> None:
        # Only the thread drives the parent (and starts its parts by reading it).
        self._start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._stopper()
        self._join()

    def _join(self) -> None:
        if self._thread is not None:
            join_producer(self._thread)


def _stop(handoff: Handoff[Any], parent: Stage[Any]) -> None:
    """Refuse what the thread reads next (waking it if it waits for room, and dropping what
    waits), and close the parent, so that a thread inside it lets go too."""
    handoff.close(drop=True)
    parent.close()


def device_put(
    ds: IterDataset[Any] | MapDataset[Any],
    device: Any,
    *,
    cpu_buffer_size: int = 4,
    device_buffer_size: int = 2,
) -> IterDataset[Any]:
    """The elements of `ds` on `device` (as `jax.device_put(element, device)` puts them),
    `cpu_buffer_size` read ahead on the host and `device_buffer_size` transferred ahead,
    each by a thread of its own (Grain's `grain.experimental.device_put`)."""
    require_iter_dataset("ds", ds)  # the check alone: `ds` stays as given, as in Grain's graph
    cpu = require_int("cpu_buffer_size", cpu_buffer_size, minimum=0)
    ahead = require_int("device_buffer_size", device_buffer_size, minimum=0)
    import jax  # here: aioloader imports JAX only where it is used

    read = ThreadPrefetchIterDataset(ds, prefetch_buffer_size=cpu)
    placed = read.map(PutOnDevice(jax.device_put, device))
    return ThreadPrefetchIterDataset(placed, prefetch_buffer_size=ahead)


class PutOnDevice:
    """`put(element, device)`: the map of `device_put` (its name shows in error notes)."""

    def __init__(self, put: Callable[[Any, Any], Any], device: Any) -> None:
        self._put, self.device = put, device

    def __call__(self, element: Any) -> Any:
        return self._put(element, self.device)

    def __repr__(self) -> str:
        return f"PutOnDevice({self.device!r})"

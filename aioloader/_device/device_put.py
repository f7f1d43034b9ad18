"""The device stage: batches onto the accelerator ahead of the training step.

`DataLoader(device_put=DevicePut(...))` adds this stage after reassembly. A
thread named `aioloader-device-{n}` takes the outputs in order, places each
on the device (`_Placer`, or `jax.device_put`; with several JAX processes and
a sharding, it builds the global array from this process's part), and keeps up to
`buffer_size` transferred batches waiting for the consumer; the consumer's
step and the next transfers therefore overlap, and the event loop never
waits on a transfer. With `worker_count=0` the transfer happens in the
caller's thread when the batch is asked for (`buffer_size` batches at a time).

JAX is imported here, when a loader with `device_put` starts, and nowhere
else in the loader.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aioloader._common.calls import stray_stop
from aioloader._common.failures import Failure, note
from aioloader._common.positions import Position
from aioloader._common.validation import int_field
from aioloader._device.handoff import Handoff
from aioloader._executors.threads import aclose_elsewhere
from aioloader._observability.meter import Meter
from aioloader._program.jobs import Outputs

if TYPE_CHECKING:  # imported when figures are asked for (see `_observability/statistics`)
    from aioloader._observability.statistics import Observation

_names = itertools.count()


@dataclass(frozen=True)
class DevicePut:
    """Transfer each batch (any pytree of arrays) to the accelerator, `buffer_size` ahead.

    Without `sharding`, leaves go to JAX's default device. With a
    `jax.sharding.Sharding`, each leaf is placed with it; when there are
    several JAX processes, each process's batch is its part of the global
    batch, and every process iterates the same global `jax.Array`s.
    """

    sharding: Any = None
    buffer_size: int = 2

    def __post_init__(self) -> None:
        int_field(self, "buffer_size", minimum=1)
        if self.sharding is not None:
            import jax

            if not isinstance(self.sharding, jax.sharding.Sharding):
                raise TypeError(f"`sharding` must be a jax.sharding.Sharding or None, got {self.sharding!r}.")

    def transfer(self, batch: Any, position: Position) -> Any:
        """`batch` as `jax.Array`s; a failure names the batch's position and the leaf.

        One process places a batch whose signature was seen before with `_Placer`, else
        puts the whole pytree in one `jax.device_put` (a call per leaf cost a
        quarter more here); only if that fails is it put leaf by leaf, to
        name the leaf that does not fit."""
        import jax

        leaves, tree = jax.tree_util.tree_flatten(batch)
        _check_narrowing(batch, leaves, position)
        global_arrays = self._global_arrays()
        if not global_arrays:
            placed = self._placer.place(batch, leaves, tree)
            if placed is not None:
                return placed
            try:
                return jax.device_put(batch, self.sharding)
            except Exception:
                pass  # again leaf by leaf below: the error then names the leaf

        def put(path: Any, leaf: Any) -> Any:
            try:
                if global_arrays:
                    return jax.make_array_from_process_local_data(self.sharding, leaf)  # type: ignore[no-untyped-call]
                return jax.device_put(leaf, self.sharding)
            except Exception as error:
                note(
                    error,
                    f"aioloader: device_put failed on leaf {jax.tree_util.keystr(path) or '(the batch)'} "
                    f"of the output just before position {_describe(position)}",
                )
                raise

        return jax.tree_util.tree_map_with_path(put, batch)

    def transfer_all(self, batches: list[Any]) -> list[Any] | None:
        """`batches` as `jax.Array`s: each by `_Placer` where it can, the others in one
        `jax.device_put`, whose fixed cost is then paid once (two batches of two leaves: 55
        us a batch instead of 95 on CPython 3.13t).

        None where they must go one by one (`transfer`): several JAX processes, a batch
        whose ints JAX would narrow, or any failure, which `transfer` then names."""
        import jax

        if self._global_arrays():
            return None
        try:
            placed = []
            for batch in batches:
                leaves, tree = jax.tree_util.tree_flatten(batch)
                _check_narrowing(batch, leaves, (0, 0, 0))
                placed.append(self._placer.place(batch, leaves, tree))
            rest = [batch for batch, done in zip(batches, placed, strict=True) if done is None]
            moved = iter(jax.device_put(rest, self.sharding) if rest else [])
        except Exception:
            return None
        return [next(moved) if done is None else done for done in placed]

    @functools.cached_property
    def _placer(self) -> _Placer:
        return _Placer(self.sharding)  # made once per DevicePut, on first use (never pickled)

    def _global_arrays(self) -> bool:
        """True when each process's batch is its part of a global `jax.Array`."""
        return self.sharding is not None and _process_count() > 1


PLACED_SIGNATURES = 8  # batch signatures that `_Placer` compiles a placement for, at most
_TRACKED_SIGNATURES = 64  # signatures it counts, at most: beyond them, `jax.device_put` alone


class _Placer:
    """Places batches as `jax.device_put(batch, sharding)` would, through a jitted identity.

    `jax.device_put` costs about 100 us of Python for a batch of two leaves
    (CPython 3.13t, JAX 0.10.2: flattening, checks and dispatch); a `jax.jit`
    of the identity, with the sharding as its input and output shardings,
    takes the same NumPy arrays through jit's C++ argument path in 10 us, and
    gives arrays with the same sharding (committed or not alike), copied
    rather than aliased (on an accelerator, the identity is a device-side
    copy of the batch after its transfer: not measured here). Each
    signature (tree, shapes, dtypes) compiles once, about 15 ms, so a batch
    goes this way only from the second time its signature is seen, for at
    most `PLACED_SIGNATURES` of them: batches whose shapes keep changing stay
    with `jax.device_put`, as does any batch with a leaf that is not a NumPy
    array, or whose signature failed to compile once.
    `place` returns None where `jax.device_put` should place the batch.
    """

    def __init__(self, sharding: Any) -> None:
        import jax

        self._identity = (
            jax.jit(_identity)
            if sharding is None
            else jax.jit(_identity, in_shardings=sharding, out_shardings=sharding)
        )
        self._seen: dict[Any, str] = {}  # signature -> "once", "placed" or "refused"
        self._placed = 0  # signatures compiled
        self._lock = threading.Lock()  # several loaders may share one DevicePut

    def place(self, batch: Any, leaves: list[Any], tree: Any) -> Any | None:
        """`batch` placed, given its leaves and tree (`jax.tree_util.tree_flatten`'s); or None."""
        import numpy as np

        if not leaves or not all(type(leaf) is np.ndarray for leaf in leaves):
            return None
        signature = (tree, tuple((leaf.shape, leaf.dtype) for leaf in leaves))
        if not self._placing(signature):
            return None
        try:
            return self._identity(batch)
        except Exception:
            with self._lock:
                self._seen[signature] = "refused"  # `jax.device_put` then places it, or names the error
            return None

    def _placing(self, signature: Any) -> bool:
        """Whether `signature` goes through the jitted identity (counting it as seen)."""
        with self._lock:
            seen = self._seen.get(signature)
            if seen is None and len(self._seen) < _TRACKED_SIGNATURES:
                self._seen[signature] = "once"
            elif seen == "once" and self._placed < PLACED_SIGNATURES:
                self._seen[signature] = seen = "placed"
                self._placed += 1
            return seen == "placed"


def _identity(batch: Any) -> Any:
    return batch


# Without `jax_enable_x64`, JAX puts 64-bit ints on the device as 32-bit ones: a value past
# that range would wrap silently (a record id of 2**40 + 7 arriving as 7).
_INT32 = {"i": (-(2**31), 2**31 - 1), "u": (0, 2**32 - 1)}


def _check_narrowing(batch: Any, leaves: list[Any], position: Position) -> None:
    """A ValueError naming the leaf if a 64-bit int leaf of `batch` (`leaves`, flattened)
    holds a value that JAX, without `jax_enable_x64`, would wrap into 32 bits."""
    import jax
    import numpy as np

    if jax.config.read("jax_enable_x64"):  # type: ignore[no-untyped-call]
        return
    for i, leaf in enumerate(leaves):
        dtype = getattr(leaf, "dtype", None)
        if not isinstance(leaf, np.ndarray | np.generic) or dtype is None or dtype.kind not in _INT32:
            continue
        low, high = _INT32[dtype.kind]
        if dtype.itemsize == 8 and leaf.size and (leaf.min() < low or leaf.max() > high):
            path = jax.tree_util.tree_flatten_with_path(batch)[0][i][0]  # the same order as `leaves`
            name = jax.tree_util.keystr(path) or "(the batch)"
            raise ValueError(
                f"aioloader: device_put would change leaf {name} of the output just before position "
                f"{_describe(position)}: it holds {dtype} values past 32 bits, which JAX without "
                "`jax_enable_x64` wraps; enable it, or cast the leaf in the pipeline."
            )


@functools.cache
def _process_count() -> int:
    """`jax.process_count()`, fixed once JAX is initialised (asked once, not per batch)."""
    import jax

    return int(jax.process_count())


def _describe(position: Position) -> str:
    index, skip_elements, skip_outputs = position
    return f"index={index}, skip_elements={skip_elements}, skip_outputs={skip_outputs}"


def transfer_outputs(outputs: Outputs, device_put: DevicePut) -> Outputs:
    """The outputs on the device, in order; a transfer failure ends them like any failure."""
    if len(outputs.items) > 1 and (moved := device_put.transfer_all(outputs.items)) is not None:
        return Outputs(moved, outputs.after, outputs.failure)
    items: list[Any] = []
    for item, after in zip(outputs.items, outputs.after, strict=True):
        try:
            items.append(device_put.transfer(item, after))
        except Exception as error:
            return Outputs(items, outputs.after[: len(items)], Failure(stray_stop(error, "device_put")))
    return Outputs(items, outputs.after, outputs.failure)


class InlineTransfers:
    """`worker_count=0`'s device stage: an `Outputs`' batches go to the device `buffer_size`
    at a time, in the consumer's thread as it asks, so that the device holds no more
    of them than a device thread would let it (a chunk may hold thousands of batches)."""

    def __init__(self, device_put: DevicePut) -> None:
        self._device_put = device_put
        self._pending: Outputs | None = None  # host batches not all transferred yet ...
        self._done = 0  # ... of which these were
        self._meter = Meter("device")  # written by the consumer's thread, which transfers

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def take(self, outputs: Outputs | None = None) -> Outputs:
        """The next group of the pending outputs (of `outputs`, now pending, if given), on the
        device; the failure, if any, comes with the last group, or a transfer's instead."""
        if outputs is not None:
            self._pending, self._done = outputs, 0
        pending = self._pending
        assert pending is not None
        start = self._done
        stop = self._done = min(start + self._device_put.buffer_size, len(pending.items))
        last = stop == len(pending.items)
        group = Outputs(
            pending.items[start:stop], pending.after[start:stop], pending.failure if last else None
        )
        started = time.perf_counter()
        moved = transfer_outputs(group, self._device_put)
        self._meter.count("device_put", len(moved.items), time.perf_counter() - started)
        if last or moved.failure is not None:
            self._pending = None
        return moved

    def observed(self, inner: Observation) -> Observation:
        """The inline engine's figures, with the transfers as the `device_put` stage."""
        return dataclasses.replace(
            inner, names=[*inner.names, ("device_put", "device_put")], meters=[*inner.meters, self._meter]
        )


@dataclass(frozen=True)
class JaxSettings:
    """The JAX settings that decide how and where a batch lands, as one thread sees them.

    `jax.enable_x64(...)` and `jax.default_device(...)` set them for the thread
    that enters them: the device thread must transfer with the consumer's, or a
    batch's dtype and device would depend on `worker_count` (at 0 the consumer's
    thread transfers)."""

    x64: bool
    default_device: Any

    @classmethod
    def of_this_thread(cls) -> JaxSettings:
        import jax

        # `read` refuses the flags that have a context manager, and the stubs lack the attributes
        config: Any = jax.config
        return cls(bool(config.jax_enable_x64), config.jax_default_device)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        import jax

        with jax.enable_x64(self.x64), jax.default_device(self.default_device):
            yield


class ThreadedOutputs(Protocol):
    """What the device thread needs of the engine it wraps (the threaded engine)."""

    def next(self) -> tuple[Outputs, int] | None: ...
    def release(self, weight: int) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def observe(self) -> Observation: ...


class DeviceEngine:
    """Wraps a threaded engine: its outputs, transferred to the device by a thread of its own.

    The device thread takes the outputs in order (a chunk's batches at a time),
    transfers each group in one call, keeps up to `buffer_size` batches waiting
    for the consumer, and gives the window weight back to the inner engine once
    they are on the device. With
    `worker_count=0` there is no device thread: the inline engines transfer
    in the consumer's thread as it asks.
    """

    def __init__(self, inner: ThreadedOutputs, device_put: DevicePut) -> None:
        self._inner, self._device_put = inner, device_put
        self._settings = JaxSettings.of_this_thread()  # the consumer's: the engine starts at its `next()`
        self._handoff: Handoff[Outputs | BaseException] = Handoff(device_put.buffer_size)
        self._meter = Meter("device")  # the device thread's own counters
        self._thread = threading.Thread(
            target=self._run, name=f"aioloader-device-{next(_names)}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._settings.entered():
                self._transfer_all()
        except BaseException as error:
            self._handoff.put(error)
        finally:
            self._handoff.close()

    def _transfer_all(self) -> None:
        while (found := self._next_counted()) is not None:
            outputs, weight = found
            del found
            if not self._transfer(outputs):
                return
            self._inner.release(weight)  # the host copies may go: the device holds the batches
            if outputs.failure is not None:
                self._handoff.put(Outputs([], [], outputs.failure))
                return
            del outputs

    def _transfer(self, outputs: Outputs) -> bool:
        """Transfer the batches of `outputs` and hand them over one by one; False once the
        hand-off is closed or a transfer failed (its failure handed over).

        As many batches go in one call as the buffer has room for (at least one): the
        device never holds more than `buffer_size` batches waiting, plus the one this
        thread holds while the buffer is full, and a consumer that waits for batches
        gets them at the cost of fewer calls."""
        meter, count = self._meter, len(outputs.items)
        done = 0
        while done < count:
            group = slice(done, done + max(1, self._handoff.room()))
            started = time.perf_counter()
            moved = transfer_outputs(
                Outputs(outputs.items[group], outputs.after[group], None), self._device_put
            )
            transferred = time.perf_counter()
            meter.count("device_put", len(moved.items), transferred - started)
            for item, after in zip(moved.items, moved.after, strict=True):
                if not self._handoff.put(Outputs([item], [after], None)):
                    return False
            if moved.failure is not None:
                self._handoff.put(Outputs([], [], moved.failure))
                return False
            meter.waiting_for_room += time.perf_counter() - transferred
            done += len(moved.items)
        return True

    def _next_counted(self) -> tuple[Outputs, int] | None:
        started = time.perf_counter()
        found = self._inner.next()
        self._meter.waiting_for_input += time.perf_counter() - started
        return found

    def observe(self) -> Observation:
        """The inner engine's figures, with the device thread and its buffer."""
        from aioloader._observability.statistics import BufferStatistics

        inner = self._inner.observe()
        waiting, capacity, peak = self._handoff.statistics()
        return dataclasses.replace(
            inner,
            names=[*inner.names, ("device_put", "device_put")],
            meters=[*inner.meters, self._meter],
            buffers=[*inner.buffers, BufferStatistics("device buffer", waiting, capacity, peak)],
        )

    def next(self) -> tuple[Outputs, int] | None:
        return _unwrap(self._handoff.get())

    async def anext(self) -> tuple[Outputs, int] | None:
        return _unwrap(await self._handoff.aget())

    def release(self, weight: int) -> None:
        pass  # the device thread gave the weight back already

    def stop(self) -> None:
        """Stop at once without waiting (see the inner engine's `stop`)."""
        self._handoff.close(drop=True)
        self._inner.stop()

    def close(self) -> None:
        self._handoff.close(drop=True)
        self._inner.close()
        if self._thread is not threading.current_thread():
            self._thread.join(2.0)

    async def aclose(self) -> None:
        """`close`, joined on a closer thread: the loop stays free meanwhile."""
        self._handoff.close(drop=True)
        await aclose_elsewhere(self.close)


def _unwrap(item: Outputs | BaseException | None) -> tuple[Outputs, int] | None:
    if isinstance(item, BaseException):
        raise item
    return None if item is None else (item, 0)

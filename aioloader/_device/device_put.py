"""The device stage: batches onto the accelerator ahead of the training step.

`DataLoader(device_put=DevicePut(...))` adds this stage after reassembly. A
thread named `aioloader-device-{n}` takes the outputs in order, places each
on the device (`_Placer`, or `jax.device_put`; with several JAX processes and
a sharding, it builds the global array from this process's part), and keeps up to
`buffer_size` transferred batches waiting for the consumer; the consumer's
step and the next transfers therefore overlap, and the event loop never
waits on a transfer (that thread is `DeviceEngine`, in `device_engine`,
loaded with the first workers). With `worker_count=0` the transfer happens
in the caller's thread when the batch is asked for (`buffer_size` batches at
a time: `InlineTransfers`).

JAX is imported here, when a loader with `device_put` starts, and nowhere
else in the loader.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aioloader._common.calls import stray_stop
from aioloader._common.failures import Failure, note
from aioloader._common.positions import Position
from aioloader._common.validation import int_field
from aioloader._observability.meter import Meter
from aioloader._program.jobs import Outputs

if TYPE_CHECKING:  # imported when figures are asked for (see `_observability/statistics`)
    from aioloader._observability.statistics import Observation


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

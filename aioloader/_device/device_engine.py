"""`DeviceEngine`: the device stage's thread, between the threaded engine and the consumer.

See `device_put` for the stage; this part is loaded with the first workers
(`worker_count=0` transfers in the consumer's thread, `InlineTransfers`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aioloader._device.device_put import DevicePut, transfer_outputs
from aioloader._device.handoff import Handoff
from aioloader._executors.threads import aclose_elsewhere
from aioloader._observability.meter import Meter
from aioloader._program.jobs import Outputs

if TYPE_CHECKING:  # imported when figures are asked for (see `_observability/statistics`)
    from aioloader._observability.statistics import Observation

_names = itertools.count()


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

    @property
    def scheduler(self) -> Any:
        """The inner engine's scheduler (whose workers may not call the iterator)."""
        return getattr(self._inner, "scheduler", None)

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

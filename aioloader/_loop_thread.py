"""The sync iterator's engine: an event loop in a background thread.

The loop thread runs the pipeline and puts each unit of outputs on a
`queue.SimpleQueue`; the consumer takes them in its own thread. A unit is a
chunk's or a batch job's outputs, never a single record, so the hand-off
costs little per output. Nothing bounds the queue itself: everything in it
still counts against the pipeline's window until the consumer releases it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from aioloader._pipeline import Executor, Pipeline
from aioloader._program import Outputs

_names = itertools.count()


@dataclass
class _Raised:
    error: BaseException


_END = object()


class LoopThread:
    """Runs `make()`'s pipeline on a private loop in thread `aioloader-loop-{n}`."""

    def __init__(self, make: Callable[[], tuple[Pipeline, Executor]]) -> None:
        self._make = make
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._loop = asyncio.new_event_loop()
        self._pipeline: Pipeline | None = None
        self._executor: Executor | None = None
        # Made before the thread starts, so that `close` can always cancel it.
        self._task = self._loop.create_task(self._pump())
        self.name = f"aioloader-loop-{next(_names)}"
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._task)
        except BaseException as error:
            self._queue.put(_Raised(error))
        finally:
            # Cleanup runs here, not in `_pump`, so that a cancellation cannot cut it short.
            if self._pipeline is not None:
                self._loop.run_until_complete(self._pipeline.aclose())
            if self._executor is not None:
                self._executor.close()
            self._loop.close()

    async def _pump(self) -> None:
        self._pipeline, self._executor = self._make()
        try:
            while (found := await self._pipeline.next()) is not None:
                self._queue.put(found)
                del found  # the consumer owns it now; do not keep it alive while waiting
            self._queue.put(_END)
        except Exception as error:
            self._queue.put(_Raised(error))

    def get(self) -> tuple[Outputs, int] | None:
        """The next outputs and their weight (blocking), or None at the end."""
        item = self._queue.get()
        if item is _END:
            return None
        if isinstance(item, _Raised):
            raise item.error
        return item  # type: ignore[return-value]

    def release(self, weight: int) -> None:
        """Tell the pipeline the consumer is done with outputs of `weight` (any thread)."""
        pipeline = self._pipeline
        if pipeline is not None:
            self._call_soon(pipeline.release, weight)

    def close(self, timeout: float = 2.0) -> None:
        """Stop the pipeline and join the loop thread (which joins the workers)."""
        if self._thread is threading.current_thread():
            return
        self._call_soon(self._task.cancel)
        self._thread.join(timeout)
        # What the consumer never took must not outlive the loader, and a
        # consumer that asks again must find the end, not wait forever.
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put(_END)

    def _call_soon(self, callback: Callable[..., object], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has finished: nothing left to tell
            self._loop.call_soon_threadsafe(callback, *args)

"""`LoaderSpec`: what an iterator and its engines need of a `DataLoader`, fixed when it was made.

`DataLoader` checks its arguments and builds one; iterators and engines take
it instead of the loader, so nothing below `_loader` imports `_loader`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from aioloader._common.options import ReadOptions
from aioloader._device.device_put import DevicePut
from aioloader._iteration.grain_state import GrainNames
from aioloader._program.program import Program
from aioloader._sampling.leftovers import Detour
from aioloader._sampling.walk import Walk

if TYPE_CHECKING:
    from aioloader._program.read_pool import ReadPool  # loaded with the first workers


class LoaderSpec(NamedTuple):
    """A loader's checked arguments, as its iterators and engines use them.

    `program(read_pool)` makes a fresh `Program` over `walk` for one engine
    (engines with worker threads hand it their `ReadPool`); `description`
    identifies the pipeline's output in every state, and `grain` names it as
    Grain's fields do; `length` is the walk's length (None when it repeats
    forever); `window` bounds the records the threaded pipeline holds ahead
    of the consumer (see `DataLoader`).
    """

    make_program: Callable[[Walk, ReadPool | None, bool, bool], Program]
    walk: Walk
    read_options: ReadOptions
    window: int
    worker_count: int  # with "auto": the most workers it may start
    executor: str
    device_put: DevicePut | None
    description: dict[str, Any]
    grain: GrainNames
    length: int | None
    auto_memory_limit: int | None = None  # `worker_count="auto"`: its memory bound, in bytes
    auto_read_threads: bool = False  # `worker_count="auto"` without `read_options`: read threads too

    def program(self, read_pool: ReadPool | None, workers: bool = False) -> Program:
        """A fresh program over this spec's walk (fusing reads and maps, but for the
        subinterpreters: see `Program`), for an engine that may start worker threads or not."""
        return self.make_program(self.walk, read_pool, self.executor != "interpreter", workers)

    def resumed(self, detour: Detour | None) -> LoaderSpec:
        """This spec with `detour` laid on its walk (none: this spec)."""
        return self if detour is None else self._replace(walk=self.walk.resumed(detour))

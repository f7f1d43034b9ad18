"""`LoaderSpec`: what an iterator and its engines need of a `DataLoader`, fixed when it was made.

`DataLoader` checks its arguments and builds one; iterators and engines take
it instead of the loader, so nothing below `_loader` imports `_loader`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aioloader._common.options import ReadOptions
from aioloader._device.device_put import DevicePut
from aioloader._program.program import Program
from aioloader._program.read_pool import ReadPool


@dataclass(frozen=True, eq=False)
class LoaderSpec:
    """A loader's checked arguments, as its iterators and engines use them.

    `program(read_pool)` makes a fresh `Program` for one engine (engines with
    worker threads hand it their `ReadPool`); `description` identifies the
    pipeline's output in every state; `length` is the sampler's length (None
    when it repeats forever).
    """

    program: Callable[[ReadPool | None], Program]
    read_options: ReadOptions
    worker_count: int  # with "auto": the most workers it may start
    executor: str
    device_put: DevicePut | None
    description: dict[str, Any]
    length: int | None
    auto_memory_limit: int | None = None  # `worker_count="auto"`: its memory bound, in bytes

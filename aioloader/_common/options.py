"""`ReadOptions`: how much reading may be in flight, and how far ahead."""

from __future__ import annotations

from dataclasses import dataclass

from aioloader._common.validation import require_int


@dataclass(frozen=True)
class ReadOptions:
    """How many reads may be in flight, and how far ahead of the consumer.

    `num_threads` bounds concurrent reads from an async source (and async
    maps); `prefetch_buffer_size` bounds the records read but not yet
    consumed, so a slow consumer makes the pipeline wait instead of grow.
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self) -> None:
        require_int("num_threads", self.num_threads, minimum=1)
        require_int("prefetch_buffer_size", self.prefetch_buffer_size, minimum=1)


@dataclass(frozen=True)
class MultiprocessingOptions:
    """Grain's options for `IterDataset.mp_prefetch`, which aioloader runs on threads.

    `num_workers` is the number of worker threads (0: the caller's thread does the work).
    `per_worker_buffer_size` and `enable_profiling` are accepted as Grain accepts them
    and change nothing: how far ahead the workers read is `ReadOptions`' business.
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False

    def __post_init__(self) -> None:
        require_int("num_workers", self.num_workers, minimum=0)
        require_int("per_worker_buffer_size", self.per_worker_buffer_size, minimum=1)
        if not isinstance(self.enable_profiling, bool):
            raise TypeError(f"`enable_profiling` must be a bool, got {self.enable_profiling!r}.")

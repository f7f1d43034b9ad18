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

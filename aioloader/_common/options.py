"""`ReadOptions`: how much reading may be in flight, and how far ahead."""

from __future__ import annotations

from dataclasses import dataclass

from aioloader._common.validation import int_field


@dataclass(frozen=True)
class ReadOptions:
    """How many reads may be in flight, and how far ahead of the consumer; Grain's options.

    `num_threads` bounds the reads in flight at once: a slow source's reads
    on the read threads, and an async source's reads (and `async def` maps)
    awaited together. 0 means Grain's "no read threads": every record is
    read by the worker that transforms it (the caller's thread with
    `worker_count=0`), and async reads are awaited one at a time.

    `prefetch_buffer_size` bounds the records read but not yet delivered, so
    that a slow consumer makes the pipeline wait instead of grow (with
    workers, `DataLoader(worker_buffer_size=)` adds their finished outputs to
    it). 0 means Grain's "no read-ahead": with `worker_count=0` nothing is
    read before `next()` asks for it, and `start_prefetch()` does nothing.

    Negative values are a ValueError; a `prefetch_buffer_size` that is not 0
    but below `num_threads` logs Grain's warning (on the `aioloader` logger):
    the buffer then limits the reads in flight.
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self) -> None:
        for name in ("num_threads", "prefetch_buffer_size"):
            int_field(self, name)
            if getattr(self, name) < 0:  # Grain's words, which its users' tests match
                raise ValueError(f"ReadOptions: {name} must be non-negative, got {getattr(self, name)}.")
        if 0 < self.prefetch_buffer_size < self.num_threads:
            # Grain's words, so that a port's logs read the same. Imported here:
            # `import aioloader` leaves logging out (several ms on 3.13t).
            import logging

            logging.getLogger("aioloader").warning(
                "prefetch_buffer_size=%s is smaller than num_threads=%s. This will limit the "
                "number of threads that can actually be used in parallel to %s, potentially "
                "hurting performance. Please set prefetch_buffer_size >= num_threads. This "
                "warning may become an error in the future.",
                self.prefetch_buffer_size,
                self.num_threads,
                self.prefetch_buffer_size,
            )

    @property
    def reads_ahead(self) -> bool:
        """True when reads may run ahead of the consumer on other threads (both options above 0)."""
        return self.num_threads > 0 and self.prefetch_buffer_size > 0


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
        int_field(self, "num_workers", minimum=0)
        int_field(self, "per_worker_buffer_size", minimum=1)
        if not isinstance(self.enable_profiling, bool):
            raise TypeError(f"`enable_profiling` must be a bool, got {self.enable_profiling!r}.")

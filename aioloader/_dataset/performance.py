"""`pick_performance_config`: Grain's worker count and read-ahead from a RAM budget.

Grain measures a few elements and divides the budget by their size: the worker
processes (each holds elements of its own) by the size of the dataset's elements, and
the read-ahead of each `to_iter_dataset()` by the size of the records it reads. The
same rule is kept here, for the same arguments and the same result type; the workers
are threads, and `worker_count="auto"` (for a `DataLoader`) or
`prefetch(worker_count)` are aioloader's own ways to choose them.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from aioloader._common.options import MultiprocessingOptions, ReadOptions
from aioloader._common.validation import require_int
from aioloader._executors.autoscale import default_maximum

MIB = 1 << 20
DEFAULT_MAX_BUFFER = 1000  # Grain's bound on the read-ahead when none is given


@dataclasses.dataclass
class PerformanceConfig:
    """What `pick_performance_config` chose: for `mp_prefetch` and `to_iter_dataset`."""

    multiprocessing_options: MultiprocessingOptions | None = None
    read_options: ReadOptions | None = None


def pick_performance_config(
    ds: Any,
    *,
    ram_budget_mb: int | None,
    max_workers: int | None,
    max_buffer_size: int | None,
    samples_to_check: int = 5,
) -> PerformanceConfig:
    """Workers and read-ahead that fit `ram_budget_mb` (None: no bound), from the size of
    `samples_to_check` elements of `ds` and of the records its parallel parts read."""
    from aioloader._dataset.iter_base import IterDataset

    if not isinstance(ds, IterDataset):
        raise TypeError(f"`ds` must be an IterDataset, got {type(ds).__name__}.")
    budget = None if ram_budget_mb is None else require_int("ram_budget_mb", ram_budget_mb, minimum=1) * MIB
    workers = default_maximum() if max_workers is None else require_int("max_workers", max_workers, minimum=1)
    buffer = (
        DEFAULT_MAX_BUFFER
        if max_buffer_size is None
        else require_int("max_buffer_size", max_buffer_size, minimum=1)
    )
    samples = require_int("samples_to_check", samples_to_check, minimum=1)
    if budget is None:
        return _config(workers, buffer)
    element = _mean_bytes(list(itertools.islice(iter(ds), samples)), samples)
    if element:
        workers = min(workers, int(budget / element))
    sources = _part_sources(ds)
    record = _mean_bytes(_records(sources, samples), samples)
    if record:
        buffer = min(buffer, int(budget / (record * len(sources))))
    return _config(workers, buffer)


def _config(workers: int, buffer: int) -> PerformanceConfig:
    return PerformanceConfig(
        MultiprocessingOptions(num_workers=workers), ReadOptions(prefetch_buffer_size=buffer)
    )


def _part_sources(ds: Any) -> list[Any]:
    """The MapDataset each parallel part of `ds` reads (each `to_iter_dataset()`), once for
    each way the graph reaches it, as Grain counts its prefetch nodes."""
    from aioloader._dataset.parallel import ToIterDataset

    found, nodes = [], [ds]
    while nodes:
        node = nodes.pop()
        if isinstance(node, ToIterDataset):
            found.append(node.parents[0])
        else:
            nodes += getattr(node, "parents", ())
    return found


def _records(sources: list[Any], samples: int) -> list[Any]:
    """About `samples` records, the same number from the first ones of each source, its
    holes skipped (as `to_iter_dataset()` reads them)."""
    if not sources:
        return []
    each = -(-samples // len(sources))
    return [record for source in sources for record in itertools.islice(_kept(source), each)]


def _kept(source: Any) -> Iterator[Any]:
    return (record for i in range(len(source)) if (record := source[i]) is not None)


def _mean_bytes(elements: list[Any], samples: int) -> float:
    """The mean size of `elements` in bytes; 0 (no bound: Grain's rule) when there are fewer
    than `samples` of them, which logs a WARNING."""
    if len(elements) < samples:
        import logging  # here: `import aioloader` leaves logging out

        logging.getLogger("aioloader").warning(
            "pick_performance_config: fewer than %d elements to measure; the budget bounds nothing.", samples
        )
        return 0.0
    return sum(_bytes(element) for element in elements) / len(elements)


def _bytes(value: Any) -> int:
    """Arrays by `nbytes`, containers by their items, anything else by `sys.getsizeof`."""
    if isinstance(value, dict):
        return sum(_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(_bytes(item) for item in value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    return sys.getsizeof(value)

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
from typing import Any

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
    budget = None if ram_budget_mb is None else require_int("ram_budget_mb", ram_budget_mb, minimum=1) * MIB
    workers = default_maximum() if max_workers is None else require_int("max_workers", max_workers, minimum=1)
    buffer = (
        DEFAULT_MAX_BUFFER
        if max_buffer_size is None
        else require_int("max_buffer_size", max_buffer_size, minimum=1)
    )
    samples = require_int("samples_to_check", samples_to_check, minimum=1)
    element = _mean_bytes(itertools.islice(iter(ds), samples))
    sources = _part_sources(ds)
    record = _mean_bytes(_records(sources, samples))
    # As Grain: a budget below one element leaves no worker (the caller's thread reads)
    # and a budget below one record per part, no read-ahead.
    if budget is not None and element:
        workers = min(workers, budget // element)
    if budget is not None and record:
        buffer = min(buffer, budget // (record * len(sources)))
    return PerformanceConfig(
        MultiprocessingOptions(num_workers=workers), ReadOptions(prefetch_buffer_size=buffer)
    )


def _part_sources(ds: Any) -> list[Any]:
    """The MapDatasets that the parallel parts of `ds` read (each `to_iter_dataset()`)."""
    from aioloader._dataset.parallel import ToIterDataset

    found, nodes, seen = [], [ds], set()
    while nodes:
        node = nodes.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ToIterDataset):
            found.append(node.parents[0])
        else:
            nodes += getattr(node, "parents", ())
    return found


def _records(sources: list[Any], samples: int) -> list[Any]:
    """Up to `samples` records in all, read by index from the first of each source."""
    each = -(-samples // len(sources)) if sources else 0
    records = [source[i] for source in sources for i in range(min(each, len(source)))]
    return [record for record in records if record is not None]  # holes hold nothing


def _mean_bytes(elements: Any) -> int:
    """The mean size of `elements` in bytes (arrays by `nbytes`, containers by their
    items, other objects by `sys.getsizeof`); 0 for none."""
    sizes = [_bytes(element) for element in elements]
    return sum(sizes) // len(sizes) if sizes else 0


def _bytes(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_bytes(item) for item in value)
    nbytes = getattr(value, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else sys.getsizeof(value)

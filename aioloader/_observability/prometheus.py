"""A running loader's statistics as Prometheus metrics (with the `metrics` extra).

`aioloader.register_metrics(iterator)` adds a collector to a
`prometheus_client` registry (the default one unless told otherwise): each
scrape takes one `iterator.statistics()` snapshot and reports it, labelled
with `loader` (a name of the user's choosing, so that several loaders can
share a registry). The collector holds the iterator weakly: once the
iterator is gone, it reports nothing. Serving the registry is the user's
(`prometheus_client.start_http_server`, or their web framework's).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from aioloader._observability.statistics import LoaderStatistics

PREFIX = "aioloader"


class LoaderCollector:
    """A `prometheus_client` collector of one iterator's statistics."""

    def __init__(self, iterator: Any, loader: str) -> None:
        self._iterator = weakref.ref(iterator)
        self.loader = loader

    def describe(self) -> list[Any]:
        return []  # metrics come and go with the stages: no fixed description

    def collect(self) -> Iterator[Any]:
        iterator = self._iterator()
        if iterator is None:
            return
        yield from metric_families(iterator.statistics(), self.loader)


def register_metrics(iterator: Any, loader: str = "loader", registry: Any = None) -> LoaderCollector:
    """Report `iterator.statistics()` (a `DataLoaderIterator` or `AsyncDataLoaderIterator`)
    on every scrape of `registry` (default: `prometheus_client.REGISTRY`), with the label
    `loader="<loader>"`. Returns the collector, for `registry.unregister`."""
    import prometheus_client

    if not isinstance(loader, str) or not loader:
        raise TypeError(f"`loader` must be a non-empty str, got {loader!r}.")
    if not callable(getattr(iterator, "statistics", None)):
        raise TypeError(f"`iterator` must be an aioloader iterator with statistics(), got {iterator!r}.")
    collector = LoaderCollector(iterator, loader)
    (prometheus_client.REGISTRY if registry is None else registry).register(collector)
    return collector


def metric_families(statistics: LoaderStatistics, loader: str) -> list[Any]:
    """The snapshot as metric families: counters for what accumulates, gauges for the rest."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def counter(name: str, doc: str, labels: list[str]) -> Any:
        return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["loader", *labels])

    def gauge(name: str, doc: str, labels: list[str]) -> Any:
        return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["loader", *labels])

    items = counter("stage_items", "Items (records, elements or batches) a stage gave", ["stage"])
    busy = counter("stage_busy_seconds", "Wall time a stage ran, summed over its threads", ["stage"])
    rate = gauge("stage_items_per_second", "A stage's items per second since the loader started", ["stage"])
    for stage in statistics.stages:
        items.add_metric([loader, stage.name], stage.items)
        busy.add_metric([loader, stage.name], stage.busy_seconds)
        rate.add_metric([loader, stage.name], stage.items_per_second)
    threads = _thread_families(statistics, loader, counter)
    buffers = _buffer_families(statistics, loader, gauge)
    share = gauge("consumer_wait_share", "Share of the consumer's time spent waiting for data", [])
    share.add_metric([loader], statistics.consumer_wait_share)
    counts = gauge("threads_in_use", "Worker and read threads in use", ["kind"])
    counts.add_metric([loader, "workers"], statistics.worker_count)
    counts.add_metric([loader, "read"], statistics.read_threads)
    return [items, busy, rate, *threads, *buffers, share, counts]


def _thread_families(statistics: LoaderStatistics, loader: str, counter: Any) -> list[Any]:
    busy = counter("thread_busy_seconds", "Time threads of a kind worked", ["threads"])
    waiting = counter("thread_waiting_seconds", "Time threads of a kind waited", ["threads", "for"])
    for thread in statistics.threads:
        busy.add_metric([loader, thread.name], thread.busy_seconds)
        waiting.add_metric([loader, thread.name, "input"], thread.waiting_for_input_seconds)
        waiting.add_metric([loader, thread.name, "room"], thread.waiting_for_room_seconds)
    return [busy, waiting]


def _buffer_families(statistics: LoaderStatistics, loader: str, gauge: Any) -> list[Any]:
    families = {
        field: gauge(f"buffer_{field}", f"A bounded buffer's {field.replace('_', ' ')}", ["buffer"])
        for field in ("in_use", "capacity", "peak")
    }
    for buffer in statistics.buffers:
        for field, family in families.items():
            family.add_metric([loader, buffer.name], getattr(buffer, field))
    return list(families.values())

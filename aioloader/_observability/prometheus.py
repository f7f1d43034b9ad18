"""Running loaders' statistics as Prometheus metrics (with the `metrics` extra).

`aioloader.register_metrics(iterator, loader=...)` reports an iterator in a
`prometheus_client` registry (the default one unless told otherwise): each
scrape takes one `statistics()` snapshot of every iterator registered there
and reports them together, one metric family per name with a sample per
loader, labelled `loader` (a name of the user's choosing): an exposition
with one family twice is invalid, and OpenMetrics parsers reject it. So
aioloader registers one collector per registry, and each call adds an entry
to it. An entry holds its iterator weakly: once the iterator is gone, it
reports nothing. Serving the registry is the user's
(`prometheus_client.start_http_server`, or their web framework's).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from aioloader._observability.statistics import LoaderStatistics

PREFIX = "aioloader"

_collectors: weakref.WeakKeyDictionary[Any, LoadersCollector] = weakref.WeakKeyDictionary()
_collectors_lock = threading.Lock()


class LoaderMetrics:
    """One iterator's place in a registry's report (what `register_metrics` returns)."""

    def __init__(self, collector: LoadersCollector, iterator: Any, loader: str) -> None:
        self._collector, self._iterator, self.loader = collector, weakref.ref(iterator), loader

    def snapshots(self) -> list[tuple[str, LoaderStatistics]]:
        """The iterator's statistics with their `loader` label: one per parallel part of a
        Dataset iterator (`loader[0]`, `loader[1]`, ... where it has several); none once
        the iterator is gone."""
        iterator = self._iterator()
        if iterator is None:
            return []
        found = iterator.statistics()
        if isinstance(found, LoaderStatistics):
            return [(self.loader, found)]
        if len(found) == 1:
            return [(self.loader, found[0])]
        return [(f"{self.loader}[{i}]", part) for i, part in enumerate(found)]

    def alive(self) -> bool:
        return self._iterator() is not None

    def reports(self, iterator: Any) -> bool:
        return self._iterator() is iterator

    def unregister(self) -> None:
        """Report this iterator no more (idempotent)."""
        self._collector.remove(self)


class LoadersCollector:
    """The collector aioloader registers in a registry: every iterator registered there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[LoaderMetrics] = []

    def add(self, iterator: Any, loader: str) -> LoaderMetrics:
        with self._lock:
            self._entries = [entry for entry in self._entries if entry.alive()]
            for entry in self._entries:
                if entry.loader == loader or entry.reports(iterator):
                    raise ValueError(
                        f"this registry reports an iterator as `loader`={entry.loader!r} already: "
                        "give each iterator its own `loader` name, once (or unregister() the other)."
                    )
            entry = LoaderMetrics(self, iterator, loader)
            self._entries.append(entry)
            return entry

    def remove(self, entry: LoaderMetrics) -> None:
        with self._lock:
            self._entries = [e for e in self._entries if e is not entry]

    def describe(self) -> list[Any]:
        return []  # metrics come and go with the stages: no fixed description

    def collect(self) -> Iterator[Any]:
        with self._lock:
            entries = list(self._entries)
        families = Families()
        for entry in entries:
            for loader, statistics in entry.snapshots():
                families.add(statistics, loader)
        yield from families.all()


def register_metrics(iterator: Any, loader: str = "loader", registry: Any = None) -> LoaderMetrics:
    """Report `iterator.statistics()` (any aioloader iterator: a DataLoader's, or a Dataset's,
    one `loader[i]` per parallel part) on every scrape of `registry` (default:
    `prometheus_client.REGISTRY`), with the label `loader="<loader>"`, unique in the
    registry. Returns its entry: `unregister()` it to stop (the iterator going away does too)."""
    import prometheus_client

    if not isinstance(loader, str) or not loader:
        raise TypeError(f"`loader` must be a non-empty str, got {loader!r}.")
    if not callable(getattr(iterator, "statistics", None)):
        raise TypeError(f"`iterator` must be an aioloader iterator with statistics(), got {iterator!r}.")
    target = prometheus_client.REGISTRY if registry is None else registry
    with _collectors_lock:
        collector = _collectors.get(target)
        if collector is None:
            collector = _collectors[target] = LoadersCollector()
            target.register(collector)
    return collector.add(iterator, loader)


class Families:
    """The metric families of one scrape: counters for what accumulates, gauges for the rest;
    each loader's snapshot adds its samples."""

    def __init__(self) -> None:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def counter(name: str, doc: str, labels: list[str]) -> Any:
            return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["loader", *labels])

        def gauge(name: str, doc: str, labels: list[str]) -> Any:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["loader", *labels])

        self.items = counter("stage_items", "Items (records, elements or batches) a stage gave", ["stage"])
        self.busy = counter("stage_busy_seconds", "Wall time a stage ran, summed over its threads", ["stage"])
        self.rate = gauge(
            "stage_items_per_second", "A stage's items per second since the loader started", ["stage"]
        )
        self.thread_busy = counter("thread_busy_seconds", "Time threads of a kind worked", ["threads"])
        self.thread_waiting = counter(
            "thread_waiting_seconds", "Time threads of a kind waited", ["threads", "for"]
        )
        self.buffers = {
            field: gauge(f"buffer_{field}", f"A bounded buffer's {field.replace('_', ' ')}", ["buffer"])
            for field in ("in_use", "capacity", "peak")
        }
        self.share = gauge("consumer_wait_share", "Share of the consumer's time spent waiting for data", [])
        self.counts = gauge("threads_in_use", "Worker and read threads in use", ["kind"])

    def add(self, statistics: LoaderStatistics, loader: str) -> None:
        for stage in statistics.stages:
            self.items.add_metric([loader, stage.name], stage.items)
            self.busy.add_metric([loader, stage.name], stage.busy_seconds)
            self.rate.add_metric([loader, stage.name], stage.items_per_second)
        for thread in statistics.threads:
            self.thread_busy.add_metric([loader, thread.name], thread.busy_seconds)
            self.thread_waiting.add_metric([loader, thread.name, "input"], thread.waiting_for_input_seconds)
            self.thread_waiting.add_metric([loader, thread.name, "room"], thread.waiting_for_room_seconds)
        for buffer in statistics.buffers:
            for field, family in self.buffers.items():
                family.add_metric([loader, buffer.name], getattr(buffer, field))
        self.share.add_metric([loader], statistics.consumer_wait_share)
        self.counts.add_metric([loader, "workers"], statistics.worker_count)
        self.counts.add_metric([loader, "read"], statistics.read_threads)

    def all(self) -> list[Any]:
        return [
            self.items,
            self.busy,
            self.rate,
            self.thread_busy,
            self.thread_waiting,
            *self.buffers.values(),
            self.share,
            self.counts,
        ]

"""Prometheus metrics of a running loader: scraped over HTTP on 127.0.0.1, the values move."""

from __future__ import annotations

import gc
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import aioloader

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

N = 2_000


class Plus(aioloader.MapTransform):
    def map(self, x: int) -> int:
        return x + 1


def make_iterator(prefetch: int = 64) -> aioloader.DataLoaderIterator:
    return iter(
        aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, N, 1),
            sampler=aioloader.IndexSampler(N, shuffle=True, num_epochs=1, seed=1),
            operations=[Plus(), aioloader.Batch(10)],
            worker_count=2,
            read_options=aioloader.ReadOptions(prefetch_buffer_size=prefetch),
        )
    )


@pytest.fixture
def served() -> Iterator[tuple[Any, str]]:
    """A registry of its own, served on 127.0.0.1 on a free port."""
    registry = prometheus_client.CollectorRegistry()
    server, thread = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield registry, f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return found[(name, tuple(sorted({"loader": "train", **labels}.items())))]


def test_a_scrape_while_the_loader_runs_shows_the_values_move(served: tuple[Any, str]) -> None:
    registry, url = served
    iterator = make_iterator()
    aioloader.register_metrics(iterator, loader="train", registry=registry)
    for _ in range(5):
        next(iterator)
    early = scrape(url)
    for _ in range(95):
        next(iterator)
    late = scrape(url)
    consumed = value(late, "aioloader_stage_items_total", stage="consumer")
    assert value(early, "aioloader_stage_items_total", stage="consumer") < consumed
    assert value(early, "aioloader_stage_items_total", stage="read") < value(
        late, "aioloader_stage_items_total", stage="read"
    )
    assert 90 <= consumed <= 100  # outputs delivered in full (the current ones count once done)
    # The window: prefetch_buffer_size + worker_count * worker_buffer_size * batch size.
    window = 64 + 2 * 1 * 10
    assert value(late, "aioloader_buffer_capacity", buffer="records window") == window
    assert value(late, "aioloader_buffer_peak", buffer="records window") <= window
    assert value(late, "aioloader_threads_in_use", kind="workers") == 2
    assert value(late, "aioloader_thread_busy_seconds_total", threads="workers") > 0
    assert 0 <= value(late, "aioloader_consumer_wait_share") <= 1
    iterator.close()


def test_a_collector_reports_nothing_once_its_iterator_is_gone(served: tuple[Any, str]) -> None:
    registry, url = served
    iterator = make_iterator()
    entry = aioloader.register_metrics(iterator, loader="train", registry=registry)
    next(iterator)
    assert any(name == "aioloader_stage_items_total" for name, _ in scrape(url))
    iterator.close()
    del iterator
    gc.collect()
    assert not any(name.startswith("aioloader_") for name, _ in scrape(url))
    entry.unregister()


@pytest.mark.parametrize(
    ("iterator", "loader", "message"),
    [
        (object(), "x", "`iterator` must be an aioloader iterator with statistics\\(\\), got <object"),
        (None, "", "`loader` must be a non-empty str, got ''."),
        (None, 3, "`loader` must be a non-empty str, got 3."),
    ],
)
def test_bad_arguments_are_named(iterator: Any, loader: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        aioloader.register_metrics(make_iterator() if iterator is None else iterator, loader=loader)


def test_loaders_sharing_a_registry_are_one_family_per_metric(served: tuple[Any, str]) -> None:
    # One collector per loader repeated every family, which OpenMetrics parsers reject.
    from prometheus_client.openmetrics.exposition import generate_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics

    registry, url = served
    train, evaluation = make_iterator(), make_iterator()
    entry = aioloader.register_metrics(train, loader="train", registry=registry)
    aioloader.register_metrics(evaluation, loader="eval", registry=registry)
    next(train)
    next(evaluation)
    text = generate_latest(registry).decode()
    assert text.count("# TYPE aioloader_stage_items counter") == 1
    names = {(family.name, s.labels["loader"]) for family in openmetrics(text) for s in family.samples}
    assert {("aioloader_stage_items", "train"), ("aioloader_stage_items", "eval")} <= names
    with pytest.raises(ValueError, match=r"reports an iterator as `loader`='train' already"):
        aioloader.register_metrics(make_iterator(), loader="train", registry=registry)
    with pytest.raises(ValueError, match=r"reports an iterator as `loader`='eval' already"):
        aioloader.register_metrics(evaluation, loader="other", registry=registry)
    entry.unregister()
    assert {labels for (name, labels) in scrape(url) if name == "aioloader_consumer_wait_share"} == {
        (("loader", "eval"),)
    }
    aioloader.register_metrics(make_iterator(), loader="train", registry=registry)  # its name is free again
    train.close()
    evaluation.close()


def test_a_dataset_iterator_reports_each_parallel_part(served: tuple[Any, str]) -> None:
    registry, url = served
    parts = [aioloader.MapDataset.range(100).to_iter_dataset().prefetch(1) for _ in range(2)]
    iterator = iter(aioloader.IterDataset.mix(parts, [1, 1]))
    aioloader.register_metrics(iterator, loader="mixed", registry=registry)
    single = iter(aioloader.MapDataset.range(50).to_iter_dataset())
    aioloader.register_metrics(single, loader="single", registry=registry)
    next(iterator)
    next(single)
    loaders = {
        dict(labels)["loader"] for (name, labels) in scrape(url) if name == "aioloader_stage_items_total"
    }
    assert loaders == {"mixed[0]", "mixed[1]", "single"}
    iterator.close()
    single.close()

"""Grain's deprecated operations under aioloader's names: alone, each maps an iterator of
`Record`s as Grain's does (compared with Grain's own where it is installed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.grain_reference import grain_python


def records(module: Any, values: list[Any], seed: int | None = None) -> Iterator[Any]:
    """`Record`s of `values` under `module`'s names, keys running backwards."""
    for i, value in enumerate(values):
        rng = None if seed is None else np.random.default_rng([seed, i])
        yield module.Record(module.RecordMetadata(index=i, record_key=len(values) - i, rng=rng), value)


def plus_one(x: int) -> int:
    return x + 1


def even(x: int) -> bool:
    return x % 2 == 0


def plus_a_draw(x: int, rng: np.random.Generator) -> int:
    return x + int(rng.integers(100))


CASES: list[tuple[str, Callable[[Any], Any], list[Any]]] = [
    ("map", lambda m: m.MapOperation(plus_one), [1, 2, 3, 4]),
    ("random map", lambda m: m.RandomMapOperation(plus_a_draw), [1, 2, 3, 4]),
    ("filter", lambda m: m.FilterOperation(even), [1, 2, 3, 4]),
    ("batch", lambda m: m.BatchOperation(2), [1, 2, 3, 4, 5]),
    ("batch, dropping the remainder", lambda m: m.BatchOperation(2, drop_remainder=True), [1, 2, 3, 4, 5]),
    ("batch of dicts", lambda m: m.BatchOperation(3), [{"a": np.ones(2) * i, "b": i} for i in range(4)]),
    ("batch_fn", lambda m: m.BatchOperation(2, batch_fn=list), [1, 2, 3]),
]


def summary(module: Any, make: Callable[[Any], Any], values: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for record in make(module)(records(module, values, seed=5)):
        data = record.data
        leaves = [data] if not isinstance(data, dict) else [data[k] for k in sorted(data)]
        arrays = [np.asarray(x).tolist() for x in leaves]
        out.append((record.metadata.index, record.metadata.record_key, arrays))
    return out


@pytest.mark.parametrize(("name", "make", "values"), CASES, ids=[c[0] for c in CASES])
def test_each_maps_records_as_grains_does(name: str, make: Callable[[Any], Any], values: list[Any]) -> None:
    gp = grain_python()
    assert summary(al, make, values) == summary(gp, make, values)


def test_alone_each_drops_the_record_key_and_keeps_the_index_and_generator() -> None:
    rng = np.random.default_rng(3)
    given = al.Record(al.RecordMetadata(index=7, record_key=2, rng=rng), 10)
    (mapped,) = al.MapOperation(plus_one)(iter([given]))
    assert (mapped.metadata.index, mapped.metadata.record_key, mapped.data) == (7, None, 11)
    (drawn,) = al.RandomMapOperation(lambda x, r: (x, r))(iter([given]))
    assert drawn.data == (10, rng)
    assert drawn.metadata.rng is rng
    assert [r.data for r in al.FilterOperation(even)(records(al, [1, 2, 3, 4]))] == [2, 4]
    batches = list(al.BatchOperation(2)(records(al, [1, 2, 3])))
    assert [(b.metadata.index, b.data.tolist()) for b in batches] == [(1, [1, 2]), (2, [3])]
    assert given.metadata.record_key == 2  # the input's metadata is left as it was


def test_records_of_another_structure_are_grains_type_error_listing_them() -> None:
    batch = al.BatchOperation(3)
    with pytest.raises(TypeError) as caught:
        list(batch(records(al, [[1, 2], [3, 4, 5], [6, 7]])))
    assert str(caught.value) == (
        "Record structures do not match. Record at position 0 has structure [1, 2], while records "
        "at positions [1] have structures [[3, 4, 5]]."
    )


@pytest.mark.parametrize("size", [0, -1, 2.0, True])
def test_a_bad_batch_size_names_the_parameter(size: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="batch_size"):
        al.BatchOperation(size)


def test_they_are_dataclasses_with_grains_fields() -> None:
    fields = {
        al.MapOperation: ["map_function"],
        al.RandomMapOperation: ["random_map_function"],
        al.FilterOperation: ["condition_function"],
        al.BatchOperation: ["batch_size", "drop_remainder", "batch_fn"],
    }
    for cls, names in fields.items():
        assert [f.name for f in dataclasses.fields(cls)] == names


def test_a_loader_runs_them_as_the_transforms_they_stand_for() -> None:
    sampler = al.IndexSampler(12, shuffle=True, num_epochs=1, seed=2)
    source = al.RangeDataSource(0, 12, 1)
    legacy = [al.MapOperation(plus_one), al.FilterOperation(even), al.BatchOperation(2)]
    current = [plus_one, FilterEven(), al.Batch(2)]
    with pytest.warns(DeprecationWarning, match="is deprecated"):
        got = list(al.DataLoader(data_source=source, sampler=sampler, operations=legacy, worker_count=2))
    wanted = list(al.DataLoader(data_source=source, sampler=sampler, operations=current))
    assert [b.tolist() for b in got] == [b.tolist() for b in wanted]
    assert sum(len(b) for b in got) == 6


class FilterEven(al.FilterTransform):
    def filter(self, element: int) -> bool:
        return even(element)

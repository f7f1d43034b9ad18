"""Types flow through MapDataset and IterDataset pipelines: checked by mypy in tests/test_typing.py.

Each `reveal_type` line ends with the type mypy must reveal; each line marked
`# error:` must be an error that names what follows the marker.
"""

from __future__ import annotations

from typing import Any, reveal_type

import numpy as np

import aioloader as al


def tokenize(text: str) -> list[int]:
    return [ord(c) for c in text]


def jitter(tokens: list[int], rng: np.random.Generator) -> np.ndarray:
    return np.asarray(tokens) + rng.integers(3)


class Upper(al.MapTransform):
    def map(self, element: Any) -> Any:
        return str(element).upper()


numbers = al.MapDataset.range(10)
reveal_type(numbers)  # aioloader._dataset.base.MapDataset[int]
texts = numbers.map(str)
reveal_type(texts)  # aioloader._dataset.base.MapDataset[str]
tokens = texts.map(tokenize)
reveal_type(tokens)  # aioloader._dataset.base.MapDataset[list[int]]
reveal_type(tokens[3])  # list[int] | None
reveal_type(tokens[1:4])  # aioloader._dataset.base.MapDataset[list[int]]
arrays = tokens.random_map(jitter, seed=0)
reveal_type(arrays)  # aioloader._dataset.base.MapDataset[numpy.ndarray[tuple[Any, ...], numpy.dtype[Any]]]
short = texts.filter(lambda text: len(text) < 2).shuffle(seed=1).repeat(2)
reveal_type(short)  # aioloader._dataset.base.MapDataset[str]
for text in short:
    reveal_type(text)  # str
lengths = texts.map(lambda text: len(text))
reveal_type(lengths)  # aioloader._dataset.base.MapDataset[int]
mixed = al.MapDataset.mix([numbers, lengths], [2.0, 1.0])
reveal_type(mixed)  # aioloader._dataset.base.MapDataset[int]
joined = al.MapDataset.concatenate([texts, texts.seed(3)])
reveal_type(joined)  # aioloader._dataset.base.MapDataset[str]
totals = numbers.batch(4, batch_fn=lambda group: sum(group))
reveal_type(totals)  # aioloader._dataset.base.MapDataset[int]
stacked = numbers.batch(4, drop_remainder=True)
reveal_type(stacked)  # aioloader._dataset.base.MapDataset[Any]
letters = al.MapDataset.source(["a", "b"])
reveal_type(letters)  # aioloader._dataset.base.MapDataset[str]
rows = al.MapDataset.source(al.SQLiteDataSource("db.sqlite", "records"))
reveal_type(rows)  # aioloader._dataset.base.MapDataset[dict[str, Any]]
shouted = texts.map(Upper())
reveal_type(shouted)  # aioloader._dataset.base.MapDataset[Any]
wrong = numbers.map(lambda number: number.upper())  # error: "int" has no attribute "upper"
twice = texts.map(tokenize).map(tokenize)  # error: Argument 1 to "map" of "MapDataset" has incompatible type
stream = tokens.to_iter_dataset()
reveal_type(stream)  # aioloader._dataset.iter_base.IterDataset[list[int]]
sizes = stream.map(len).filter(lambda size: size > 1)
reveal_type(sizes)  # aioloader._dataset.iter_base.IterDataset[int]
reveal_type(iter(sizes))  # aioloader._dataset.iterator.DatasetIterator[int]
reveal_type(next(iter(sizes)))  # int
reveal_type(aiter(sizes))  # aioloader._dataset.iterator.AsyncDatasetIterator[int]
noisy = stream.random_map(jitter, seed=1).map(lambda array: array.tolist())
reveal_type(noisy)  # aioloader._dataset.iter_base.IterDataset[Any]
blend = al.IterDataset.mix({"a": sizes, "b": sizes.prefetch(2)}, {"a": 1.0, "b": 3.0})
reveal_type(blend)  # aioloader._dataset.iter_base.IterDataset[int]
sums = blend.batch(8, batch_fn=lambda group: sum(group))
reveal_type(sums)  # aioloader._dataset.iter_base.IterDataset[int]
rows_of_tokens = al.FirstFitPackIterDataset(stream, length_struct={"tokens": 64}, num_packing_bins=4)
reveal_type(rows_of_tokens)  # aioloader._dataset.iter_packing.FirstFitPackIterDataset
for row in rows_of_tokens:
    reveal_type(row)  # dict[str, Any]
bad = sizes.map(lambda size: size.upper())  # error: "int" has no attribute "upper"

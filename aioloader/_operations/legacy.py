"""Grain's deprecated operations, under their names: `MapOperation`, `RandomMapOperation`,
`FilterOperation`, `BatchOperation`.

Grain still exports them, so a pipeline written with them must keep working when only
the import changes. A `DataLoader` runs each as the transform it stands for (see
`compile_operations` and `own_batch`), with a DeprecationWarning naming the successor.
Called alone, each is what Grain's is: a function from an iterator of `Record`s to an
iterator of `Record`s, whose metadata loses its record key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from aioloader._operations.batching import stack
from aioloader._operations.transforms import Batch
from aioloader._sampling.metadata import Record


class Operation(Protocol):
    """Grain's protocol of a legacy operation: records in, records out."""

    def __call__(self, input_iterator: Iterator[Record[Any]]) -> Iterator[Record[Any]]: ...


@dataclasses.dataclass
class MapOperation:
    """Deprecated: `MapTransform`. `map_function(data)` for each record."""

    map_function: Callable[[Any], Any]

    def __call__(self, input_iterator: Iterator[Record[Any]]) -> Iterator[Record[Any]]:
        for record in input_iterator:
            yield Record(record.metadata.remove_record_key(), self.map_function(record.data))


@dataclasses.dataclass
class RandomMapOperation:
    """Deprecated: `RandomMapTransform`. `random_map_function(data, rng)` for each record,
    with the record's own generator."""

    random_map_function: Callable[[Any, Any], Any]

    def __call__(self, input_iterator: Iterator[Record[Any]]) -> Iterator[Record[Any]]:
        for record in input_iterator:
            data = self.random_map_function(record.data, record.metadata.rng)
            yield Record(record.metadata.remove_record_key(), data)


@dataclasses.dataclass
class FilterOperation:
    """Deprecated: `FilterTransform`. The records for which `condition_function(data)` holds."""

    condition_function: Callable[[Any], bool]

    def __call__(self, input_iterator: Iterator[Record[Any]]) -> Iterator[Record[Any]]:
        for record in input_iterator:
            if self.condition_function(record.data):
                yield Record(record.metadata.remove_record_key(), record.data)


@dataclasses.dataclass
class BatchOperation:
    """Deprecated: `Batch`. Batches of `batch_size` records, stacked as `Batch` stacks them
    (or by `batch_fn`); each batch has the metadata of its last record."""

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[Any]], Any] | None = None

    def __post_init__(self) -> None:
        Batch(self.batch_size, self.drop_remainder, self.batch_fn)  # the same checks, by name

    def __call__(self, input_iterator: Iterator[Record[Any]]) -> Iterator[Record[Any]]:
        batch_fn = self.batch_fn or _stack_records
        pending: list[Any] = []
        last: Record[Any] | None = None
        for last in input_iterator:
            pending.append(last.data)
            if len(pending) == self.batch_size:
                yield Record(last.metadata.remove_record_key(), batch_fn(pending))
                pending = []
        if pending and not self.drop_remainder and last is not None:
            yield Record(last.metadata.remove_record_key(), batch_fn(pending))


def _stack_records(elements: Sequence[Any]) -> Any:
    """`Batch`'s stacking, with the error Grain's `BatchOperation` gives for records of
    another structure than the first: a TypeError listing them."""
    try:
        return stack(elements)
    except ValueError:
        first = elements[0]
        others = [i for i, element in enumerate(elements[1:], 1) if not _alike(first, element)]
        if not others:
            raise
        raise TypeError(
            f"Record structures do not match. Record at position 0 has structure {first}, while "
            f"records at positions {others} have structures {[elements[i] for i in others]}."
        ) from None


def _alike(first: Any, other: Any) -> bool:
    """True when `first` and `other` stack together."""
    try:
        stack([first, other])
    except ValueError:
        return False
    return True

"""`MapDataset[T]`: a lazy, immutable dataset with random access, Grain's Dataset API.

A `MapDataset` is a tree of transformations over sources. `ds[i]` computes element
`i` when asked, through the tree; nothing is held or cached. As in Grain, the "true"
length is infinite: `len(ds)` is the length of one epoch, and `ds[i]` for `i >= len(ds)`
is the element of a later epoch (a shuffle reshuffles it, a random map draws anew).
Transformations that drop elements (`filter`) leave `None` in their place; iterating
skips the holes.

Every transformation lives in its own module (mapping, filtering, batching, mixing,
...); the methods here only build the nodes, importing their modules when called,
because those modules import this one.

Thread safety: a dataset never changes after it is built, and a node keeps no state
between calls, so `ds[i]` may be called from many threads at once as long as the
user's transforms and sources allow it.
"""

from __future__ import annotations

import abc
import builtins
import functools
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

import numpy as np

from aioloader._common.options import ReadOptions
from aioloader._common.validation import require_int
from aioloader._operations.transforms import (
    FilterTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
)

if TYPE_CHECKING:
    from aioloader._dataset.iter_base import IterDataset
    from aioloader._dataset.iterator import DatasetIterator

T = TypeVar("T")
U = TypeVar("U")
T_co = TypeVar("T_co", covariant=True)
P = ParamSpec("P")


class Indexable(Protocol[T_co]):
    """What `MapDataset.source` takes: a sized object indexed by ints (a list, a data source)."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: int, /) -> T_co: ...


class MapDataset(abc.ABC, Generic[T]):
    """A dataset with random access: `len(ds)`, `ds[i]` (`None` where a filter dropped
    the element), `ds[a:b:c]`, and transformations that return new datasets.

    Subclasses define `__len__` and either `_get(index)` (aioloader's nodes; the index is
    already checked) or, as in Grain, `__getitem__` itself.
    """

    def __init__(self, parents: MapDataset[Any] | Sequence[MapDataset[Any]] = ()) -> None:
        self._parents: tuple[MapDataset[Any], ...] = (
            (parents,) if isinstance(parents, MapDataset) else tuple(parents)
        )
        # Set by `seed()`: the seed that random transformations downstream derive theirs from.
        self._seed_rng_seed: int | None = None

    @property
    def parents(self) -> tuple[MapDataset[Any], ...]:
        """The datasets this one transforms (none for a source)."""
        return self._parents

    @functools.cached_property
    def _parent(self) -> MapDataset[Any]:
        """The one dataset this one transforms (Grain's spelling, for a user's own subclass;
        aioloader's nodes set their own)."""
        if len(self._parents) != 1:
            raise AttributeError(
                f"`_parent` is for a dataset of one parent; {type(self).__name__} has {len(self._parents)}."
            )
        return self._parents[0]

    @abc.abstractmethod
    def __len__(self) -> int:
        """The length of one epoch (`sys.maxsize` when it repeats forever)."""

    @overload
    def __getitem__(self, index: builtins.slice) -> MapDataset[T]: ...

    @overload
    def __getitem__(self, index: int) -> T | None: ...

    def __getitem__(self, index: int | builtins.slice) -> MapDataset[T] | T | None:
        """`ds[i]`: element `i` (or `None` if filtered out); `ds[a:b:c]`: a sliced dataset.

        `i` is any int from 0 up, also past `len(ds)` (the next epochs).
        """
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._get(check_index(index, len(self)))

    def _get(self, index: int) -> T | None:
        """Element `index` (checked: `0 <= index`, and the dataset is not empty)."""
        raise NotImplementedError(f"{type(self).__name__} must define `_get` or `__getitem__`.")

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        """The elements at `indices`, in order; nodes override it to read in batches."""
        return [self[i] for i in indices]

    def __iter__(self) -> DatasetIterator[T]:
        """The elements in order, without the `None` holes, read in this thread: as Grain's,
        `iter(self.to_iter_dataset())`, so the iterator has `get_state`/`set_state`."""
        return iter(self.to_iter_dataset())

    # Sources and combinations (Grain's `MapDataset.source`, `.range`, `.mix`, `.concatenate`).

    @staticmethod
    def source(source: Indexable[U]) -> MapDataset[U]:
        """A dataset of `source[0], ..., source[len(source) - 1]`: a sequence or a data source.

        A source with `__getitems__(keys)` is read in batches.
        """
        from aioloader._dataset.sources import SourceMapDataset

        return SourceMapDataset(source)

    @staticmethod
    def range(start: int, stop: int | None = None, step: int = 1) -> MapDataset[int]:
        """The ints of `range(start, stop, step)` (or `range(start)`), as Python's `range`."""
        from aioloader._dataset.sources import RangeMapDataset

        return RangeMapDataset(start, stop, step)

    @staticmethod
    def mix(datasets: Sequence[MapDataset[U]], weights: Sequence[float] | None = None) -> MapDataset[U]:
        """The elements of `datasets` interleaved in the proportions of `weights` (equal by
        default), in Grain's order; as long as the shortest input allows."""
        from aioloader._dataset.mixing import MixedMapDataset

        return MixedMapDataset(datasets, weights)

    @staticmethod
    def concatenate(datasets: Sequence[MapDataset[U]]) -> MapDataset[U]:
        """The elements of `datasets`, one after the other; epoch n of each makes epoch n."""
        from aioloader._dataset.mixing import ConcatenateMapDataset

        return ConcatenateMapDataset(datasets)

    @staticmethod
    def select_from_datasets(datasets: Sequence[MapDataset[U]], selection_map: Any) -> MapDataset[U]:
        """Element `k` is element `j` of `datasets[d]`, where `(d, j) = selection_map[k]`
        (Grain's `DatasetSelectionMap`: any object with `len()` and `[]`); as long as the map."""
        from aioloader._dataset.mixing import SelectFromDatasetsMapDataset

        return SelectFromDatasetsMapDataset(datasets, selection_map)

    # Transformations.

    def seed(self, seed: int) -> MapDataset[T]:
        """The same elements; random transformations downstream without a seed of their own
        derive one from `seed` and their place in the pipeline, as in Grain."""
        return _WithSeedMapDataset(self, seed)

    def shuffle(self, seed: int | None = None) -> MapDataset[T]:
        """The same elements in a global order chosen by `seed` (or by `seed()` upstream),
        Grain's order; each epoch is shuffled differently."""
        from aioloader._dataset.shuffle import ShuffleMapDataset

        return ShuffleMapDataset(self, seed)

    def slice(self, sl: builtins.slice) -> MapDataset[T]:
        """The elements at the indices `sl` selects, as Python slices a list of one epoch."""
        from aioloader._dataset.slicing import SliceMapDataset

        return SliceMapDataset(self, sl)

    def repeat(self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True) -> MapDataset[T]:
        """`num_epochs` epochs (forever if None: `len` is then `sys.maxsize`). Random
        transformations upstream draw anew each epoch unless `reseed_each_epoch=False`."""
        from aioloader._dataset.repeat import RepeatMapDataset

        return RepeatMapDataset(self, num_epochs, reseed_each_epoch=reseed_each_epoch)

    # The transform objects come first: an overload that takes Any would match every
    # callable too, and make mypy give up on inferring U from it.
    @overload
    def map(self, transform: MapTransform) -> MapDataset[Any]: ...

    @overload
    def map(self, transform: Callable[[T], U]) -> MapDataset[U]: ...

    def map(self, transform: Any) -> MapDataset[Any]:
        """`transform(x)` (a callable, or a MapTransform's `map`) for every element `x`."""
        from aioloader._dataset.mapping import MapMapDataset

        return MapMapDataset(self, transform)

    @overload
    def random_map(self, transform: RandomMapTransform, *, seed: int | None = None) -> MapDataset[Any]: ...

    @overload
    def random_map(
        self, transform: Callable[[T, np.random.Generator], U], *, seed: int | None = None
    ) -> MapDataset[U]: ...

    def random_map(self, transform: Any, *, seed: int | None = None) -> MapDataset[Any]:
        """`transform(x, rng)` for every element, with a generator that is a pure function of
        the seed and the element's index (Grain's generator, so the draws equal Grain's)."""
        from aioloader._dataset.mapping import RandomMapMapDataset

        return RandomMapMapDataset(self, transform, seed)

    @overload
    def map_with_index(self, transform: MapWithIndexTransform) -> MapDataset[Any]: ...

    @overload
    def map_with_index(self, transform: Callable[[int, T], U]) -> MapDataset[U]: ...

    def map_with_index(self, transform: Any) -> MapDataset[Any]:
        """`transform(i, x)` (a callable, or a MapWithIndexTransform's `map_with_index`) for
        every element `x`, with its index `i` (past `len(ds)` in later epochs, as in Grain)."""
        from aioloader._dataset.mapping import MapWithIndexMapDataset

        return MapWithIndexMapDataset(self, transform)

    def filter(self, transform: Callable[[T], object] | FilterTransform) -> MapDataset[T]:
        """The elements for which `transform` is true; the others become `None` holes,
        which iteration skips (so `len` does not change)."""
        from aioloader._dataset.mapping import FilterMapDataset

        return FilterMapDataset(self, transform)

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: None = None
    ) -> MapDataset[Any]: ...

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: Callable[[list[T]], U]
    ) -> MapDataset[U]: ...

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[list[T]], Any] | None = None,
    ) -> MapDataset[Any]:
        """Consecutive elements in groups of `batch_size`, stacked leaf by leaf (or passed to
        `batch_fn`); the last, smaller batch is dropped if `drop_remainder`."""
        from aioloader._dataset.batching import BatchMapDataset

        return BatchMapDataset(self, batch_size, drop_remainder, batch_fn)

    def apply(self, transformations: Any) -> MapDataset[Any]:
        """This dataset with `transformations` applied in order: one transform object or a
        sequence of them (aioloader's or Grain's: `Batch`, map, random map, map with index,
        filter), each given to the method that takes it (`batch`, `map`, ...), as in Grain."""
        from aioloader._dataset.transformations import apply_transformations

        return apply_transformations(self, transformations)

    def pipe(
        self, func: Callable[Concatenate[MapDataset[T], P], U], /, *args: P.args, **kwargs: P.kwargs
    ) -> U:
        """`func(self, *args, **kwargs)`: a transformation that is not a method, in a chain."""
        return func(self, *args, **kwargs)

    @functools.cached_property
    def _default_seed(self) -> int | None:
        """The seed for a random transformation given none: Grain's derivation from the
        nearest `seed()` calls upstream and their distances, or None without one."""
        from aioloader._dataset.functions import derive_seed

        return derive_seed(self)

    def to_iter_dataset(
        self, read_options: ReadOptions | None = None, *, allow_nones: bool = False
    ) -> IterDataset[T]:
        """An `IterDataset` of this dataset's elements in order, one epoch (or forever, if
        it repeats forever), without the `None` holes unless `allow_nones`.

        The elements are read by index on aioloader's engine, and the maps, filters and
        batch that follow are applied there too, in chunks, on `prefetch(worker_count)`
        worker threads (in the caller's thread without `prefetch`): the output does not
        depend on the worker count. `read_options` bounds the reads in flight and how far
        ahead they go, as for a `DataLoader`.
        """
        from aioloader._dataset.parallel import ToIterDataset

        return ToIterDataset(self, read_options, allow_nones=allow_nones)


class _WithSeedMapDataset(MapDataset[T]):
    """The parent's elements; holds the seed that `seed()` set."""

    def __init__(self, parent: MapDataset[T], seed: int) -> None:
        super().__init__(parent)
        self._parent = parent
        self._seed_rng_seed = require_int("seed", seed, minimum=0)

    def __len__(self) -> int:
        return len(self._parent)

    def _get(self, index: int) -> T | None:
        return self._parent[index]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        return self._parent._getitems(indices)

    def __repr__(self) -> str:
        return f"{self._parent!r}.seed({self._seed_rng_seed})"


def graph(dataset: MapDataset[Any]) -> Iterator[MapDataset[Any]]:
    """`dataset` and every dataset below it, depth first (one reached twice, twice). A
    user's node that never called `MapDataset.__init__` has no parents to follow."""
    nodes = [dataset]
    while nodes:
        node = nodes.pop()
        yield node
        nodes += getattr(node, "parents", ())


def check_index(index: Any, length: int) -> int:
    """`index` as an int for a dataset of `length`, or an error naming it.

    Any int is taken, negative ones too: as in Grain, each dataset wraps it with
    its own arithmetic (`index % len`, so -1 is the last element; a shuffle's -1
    falls in its epoch -1)."""
    try:
        value = operator.index(index)
    except TypeError:
        raise TypeError(
            f"`index` must be an int or a slice, got {index!r} of type {type(index).__name__}."
        ) from None
    if length == 0:
        raise IndexError(f"`index` {value} is out of range: the dataset is empty.")
    return value


def require_seed(seed: Any, default: int | None, what: str) -> int:
    """The seed a random transformation uses: its own, else the one `seed()` upstream gives."""
    if seed is None:
        if default is None:
            raise ValueError(
                f"`{what}` requires a seed: pass `seed=` or call `ds.seed(seed)` before it, got seed=None."
            )
        return default
    return require_int("seed", seed, minimum=0)


def require_shuffle_seed(seed: Any, default: int | None, what: str) -> int:
    """`require_seed`, for Grain's index shuffle, whose round keys take seeds below 2**32."""
    value = require_seed(seed, default, what)
    if value >= 2**32:
        raise ValueError(f"`seed` must be less than 2**32 for `{what}`, got {value}.")
    return value

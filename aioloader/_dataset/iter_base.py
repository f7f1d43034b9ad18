"""`IterDataset[T]`: a lazy, immutable dataset read in order, Grain's Dataset API.

An `IterDataset` is a graph of transformations, one node per call, as in Grain (the
graph is what `seed()` derives seeds from). Iterating compiles it (see `stages`): the
parallel part of each branch, a MapDataset read by index with the maps, filters and
batch after it, runs on aioloader's engine, the one `DataLoader` runs on, in chunks, on
`prefetch(worker_count)` worker threads; what must run in order (mixing iterators,
window shuffles, interleaving, packing, and what follows them) runs in the consumer's
iterator. The output never depends on the worker count, and `get_state()` resumes with
any worker count.

As in `base`, each transformation lives in its own module; the methods here only build
the nodes, importing their modules when called, because those modules import this one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import numpy as np

from aioloader._common.options import MultiprocessingOptions
from aioloader._common.validation import require_int
from aioloader._dataset.functions import derive_seed
from aioloader._dataset.stages import ForeignStage, Plan, Settings
from aioloader._device.device_put import DevicePut
from aioloader._operations.transforms import (
    FilterTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
)

if TYPE_CHECKING:
    from aioloader._dataset.base import MapDataset
    from aioloader._dataset.iterator import AsyncDatasetIterator, DatasetIterator

T = TypeVar("T")
U = TypeVar("U")
P = ParamSpec("P")


class IterDataset(Generic[T]):
    """A dataset read in order: `for x in ds`, `async for x in ds`, and transformations
    that return new datasets. `iter(ds)` gives a `DatasetIterator` with `get_state()` and
    `set_state()`."""

    _last = False  # True for `device_put`, which no transformation may follow

    def __init__(self, parents: MapDataset[Any] | IterDataset[Any] | Sequence[Any] = ()) -> None:
        from aioloader._dataset.base import MapDataset

        if isinstance(parents, (MapDataset, IterDataset)):
            parents = (parents,)
        self._parents: tuple[Any, ...] = tuple(parents)
        for parent in self._parents:
            if getattr(parent, "_last", False):
                raise ValueError(
                    f"`device_put` must be the last transformation of an IterDataset; "
                    f"{type(self).__name__} cannot follow {parent!r}."
                )
        # Set by `seed()`: the seed that random transformations downstream derive theirs from.
        self._seed_rng_seed: int | None = None

    @property
    def parents(self) -> tuple[Any, ...]:
        """The datasets this one transforms (MapDatasets or IterDatasets)."""
        return self._parents

    @functools.cached_property
    def _parent(self) -> Any:
        """The one dataset this one transforms (Grain's spelling, for a user's own subclass;
        aioloader's nodes set their own)."""
        if len(self._parents) != 1:
            raise AttributeError(
                f"`_parent` is for a dataset of one parent; {type(self).__name__} has {len(self._parents)}."
            )
        return self._parents[0]

    def _plan(self, settings: Settings) -> Plan:
        """This node compiled: a parallel part still open to operations, or a stage.

        `settings` say how the parallel parts below run (a `prefetch` above sets them).
        aioloader's nodes define it; a user's subclass may instead define `__iter__`, as
        in Grain, returning an iterator with `get_state()` and `set_state()`, which then
        runs in order (its state must be JSON-serialisable for a checkpoint).
        """
        if type(self).__iter__ is IterDataset.__iter__:
            raise TypeError(f"{type(self).__name__} must define `__iter__` (or `_plan`), as an IterDataset.")
        return ForeignStage(iter(self))

    def __iter__(self) -> DatasetIterator[T]:
        """A new iterator over the elements, from the start."""
        from aioloader._dataset.iterator import DatasetIterator

        return DatasetIterator(self)

    def __aiter__(self) -> AsyncDatasetIterator[T]:
        """A new iterator for `async for`: the event loop stays free while the work runs."""
        from aioloader._dataset.iterator import AsyncDatasetIterator

        return AsyncDatasetIterator(self)

    @functools.cached_property
    def _default_seed(self) -> int | None:
        """The seed for a random transformation given none (Grain's derivation)."""
        return derive_seed(self)

    # Combinations.

    @staticmethod
    def mix(
        datasets: Sequence[IterDataset[U]] | Mapping[str, IterDataset[U]],
        weights: Sequence[float] | Mapping[str, float] | None = None,
    ) -> IterDataset[U]:
        """The elements of `datasets` interleaved in the proportions of `weights` (equal by
        default), in Grain's order, until any of them ends.

        With `datasets` (and `weights`) given as dicts, a state restores by name: a
        pipeline with new weights, new components or fewer components continues each
        component it had from where it was, and starts the new ones from the beginning.
        """
        from aioloader._dataset.iter_mixing import MixedIterDataset

        return MixedIterDataset(datasets, weights)

    # Transformations.

    def seed(self, seed: int) -> IterDataset[T]:
        """The same elements; random transformations downstream without a seed of their own
        derive one from `seed` and their place in the pipeline, as in Grain."""
        return _WithSeedIterDataset(self, seed)

    @overload
    def map(self, transform: MapTransform) -> IterDataset[Any]: ...

    @overload
    def map(self, transform: Callable[[T], U]) -> IterDataset[U]: ...

    def map(self, transform: Any) -> IterDataset[Any]:
        """`transform(x)` (a callable, or a MapTransform's `map`) for every element `x`."""
        from aioloader._dataset.iter_mapping import MapIterDataset

        return MapIterDataset(self, transform)

    @overload
    def random_map(self, transform: RandomMapTransform, *, seed: int | None = None) -> IterDataset[Any]: ...

    @overload
    def random_map(
        self, transform: Callable[[T, np.random.Generator], U], *, seed: int | None = None
    ) -> IterDataset[U]: ...

    def random_map(self, transform: Any, *, seed: int | None = None) -> IterDataset[Any]:
        """`transform(x, rng)` for every element, with Grain's generator for the seed and
        the element's index (see `iter_mapping` for which index)."""
        from aioloader._dataset.iter_mapping import RandomMapIterDataset

        return RandomMapIterDataset(self, transform, seed)

    @overload
    def map_with_index(self, transform: MapWithIndexTransform) -> IterDataset[Any]: ...

    @overload
    def map_with_index(self, transform: Callable[[int, T], U]) -> IterDataset[U]: ...

    def map_with_index(self, transform: Any) -> IterDataset[Any]:
        """`transform(i, x)` (a callable, or a MapWithIndexTransform's `map_with_index`) for
        every element `x`, with its index `i` (see `iter_mapping` for which index)."""
        from aioloader._dataset.iter_mapping import MapWithIndexIterDataset

        return MapWithIndexIterDataset(self, transform)

    def filter(self, transform: Callable[[T], object] | FilterTransform) -> IterDataset[T]:
        """The elements for which `transform` is true, in order."""
        from aioloader._dataset.iter_mapping import FilterIterDataset

        return FilterIterDataset(self, transform)

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: None = None
    ) -> IterDataset[Any]: ...

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: Callable[[list[T]], U]
    ) -> IterDataset[U]: ...

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[list[T]], Any] | None = None,
    ) -> IterDataset[Any]:
        """Consecutive elements in groups of `batch_size`, stacked leaf by leaf (or passed to
        `batch_fn`); the last, smaller batch is dropped if `drop_remainder`."""
        from aioloader._dataset.iter_mapping import BatchIterDataset

        return BatchIterDataset(self, batch_size, drop_remainder, batch_fn)

    def apply(self, transformations: Any) -> IterDataset[Any]:
        """This dataset with `transformations` applied in order: one transform object or a
        sequence of them (aioloader's or Grain's: `Batch`, map, random map, map with index,
        filter), each given to the method that takes it (`batch`, `map`, ...), as in Grain."""
        from aioloader._dataset.transformations import apply_transformations

        return apply_transformations(self, transformations)

    def pipe(
        self, func: Callable[Concatenate[IterDataset[T], P], U], /, *args: P.args, **kwargs: P.kwargs
    ) -> U:
        """`func(self, *args, **kwargs)`: a transformation that is not a method, in a chain."""
        return func(self, *args, **kwargs)

    # How it runs.

    def prefetch(
        self,
        worker_count: int | MultiprocessingOptions | None = None,
        *,
        executor: str = "thread",
        multiprocessing_options: MultiprocessingOptions | None = None,
    ) -> IterDataset[T]:
        """The same elements, with every parallel part upstream run on `worker_count` worker
        threads of aioloader's engine (each part its own; `executor="interpreter"` runs
        their maps and filters before the batch in subinterpreters, as `DataLoader` does).

        Grain's form, `prefetch(MultiprocessingOptions(num_workers=n))` (also by its keyword,
        `multiprocessing_options=`), is accepted too, and means threads. The output is the
        same for every worker count.
        """
        from aioloader._dataset.prefetch import PrefetchIterDataset

        if (worker_count is None) == (multiprocessing_options is None):
            raise TypeError(
                "`prefetch` takes one of `worker_count` and `multiprocessing_options`, "
                f"got {worker_count!r} and {multiprocessing_options!r}."
            )
        given = worker_count if multiprocessing_options is None else multiprocessing_options
        return PrefetchIterDataset(self, given, executor)

    def mp_prefetch(
        self,
        options: MultiprocessingOptions | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
    ) -> IterDataset[T]:
        """Grain's `mp_prefetch`, on threads: `prefetch(options.num_workers)` (10 workers
        without options, Grain's default).

        Unlike Grain's, the output is the same for every worker count, filters and packing
        included: the workers share the chunks of one stream instead of each taking a slice
        of the dataset, so `sequential_slice` changes nothing. There are no worker processes
        to initialise: a `worker_init_fn` is refused.
        """
        if worker_init_fn is not None:
            raise ValueError(
                f"`worker_init_fn` has nothing to run in: aioloader's mp_prefetch uses threads, not "
                f"processes; got {worker_init_fn!r}. Initialise once, before iterating."
            )
        if not isinstance(sequential_slice, bool):
            raise TypeError(f"`sequential_slice` must be a bool, got {sequential_slice!r}.")
        return self.prefetch(options or MultiprocessingOptions(num_workers=10))

    def device_put(self, device_put: DevicePut | None = None) -> IterDataset[Any]:
        """The elements (pytrees of arrays) put on the accelerator by `device_put`
        (`DevicePut()` by default: JAX's default device, 2 ahead) in a thread of its own,
        ahead of the consumer. It must be the last transformation."""
        from aioloader._dataset.prefetch import DevicePutIterDataset

        return DevicePutIterDataset(self, device_put or DevicePut())


class _WithSeedIterDataset(IterDataset[T]):
    """The parent's elements; holds the seed that `seed()` set."""

    def __init__(self, parent: IterDataset[T], seed: int) -> None:
        super().__init__(parent)
        self._parent = parent
        self._seed_rng_seed = require_int("seed", seed, minimum=0)

    def _plan(self, settings: Settings) -> Plan:
        plan: Plan = self._parent._plan(settings)
        return plan

    def __repr__(self) -> str:
        return f"{self._parent!r}.seed({self._seed_rng_seed})"


def require_iter_dataset(name: str, value: Any) -> IterDataset[Any]:
    """`value` as an IterDataset (a MapDataset is converted, as Grain converts it)."""
    from aioloader._dataset.base import MapDataset

    if isinstance(value, MapDataset):
        return value.to_iter_dataset()
    if not isinstance(value, IterDataset):
        raise TypeError(f"`{name}` must be an IterDataset or a MapDataset, got {type(value).__name__}.")
    return value

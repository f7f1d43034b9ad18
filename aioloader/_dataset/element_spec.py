"""`get_element_spec(ds)`: the shape and dtype of a dataset's elements, from its graph alone
(Grain's experimental `grain.experimental.get_element_spec`).

Nothing is read, transformed or iterated: the spec is worked out node by node, from a
source that knows its elements (`MapDataset.range`: int64 scalars) down through the
nodes that keep the parent's elements as they are (slice, shuffle, repeat, filter,
limit, prefetches, seed, cache, window shuffles, `to_iter_dataset`), those that combine
parents (a mix or a concatenation has its first input's spec; a zip the tuple of its
parents'; an interleave its first dataset's), a map whose transform defines
`output_spec(input_spec)`, and a batch or rebatch, which put a batch dimension in front
of every leaf. The rules, and their errors, are Grain 0.2.18's:

- a dataset class that defines `_element_spec` (Grain's hook, a property) is asked
  first: a user's own node says what it makes;
- a map (or random map, or map with index) whose transform has no `output_spec` is a
  ValueError naming the transform, as in Grain;
- a batch's leading dimension is `batch_size` with `drop_remainder`, else None (the
  last batch may be shorter); a `batch_fn` that defines
  `output_spec(input_spec, batch_size, drop_remainder)` answers for itself, any other
  `batch_fn` is a NotImplementedError;
- a rebatch's leading dimension is its `batch_size`, whatever `drop_remainder` says;
- any other node (a source of records, a flat map, a packer, Parquet rows) is a
  NotImplementedError naming the node's class.

Specs are pytrees: dicts (whose keys come back sorted, as `jax.tree_util` orders them),
lists, tuples and named tuples hold them, and None is an empty subtree.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from aioloader._dataset.functions import KINDS
from aioloader._operations.transforms import is_grain

Rule = Callable[[Any], Any]


@runtime_checkable
class ShapeDtypeStructProtocol(Protocol):
    """Anything with a shape and a dtype, as the leaves of an element spec (Grain's name
    for their type): `ShapeDtypeStruct`, `jax.ShapeDtypeStruct`, a NumPy array."""

    @property
    def shape(self) -> tuple[int | None, ...]: ...

    @property
    def dtype(self) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ShapeDtypeStruct:
    """The shape (None for a dimension not known ahead) and dtype of an array."""

    shape: tuple[int | None, ...]
    dtype: Any  # anything numpy takes for a dtype (`np.int64`, `np.dtype("f4")`, "int32")


def get_element_spec(ds: Any) -> Any:
    """The pytree of `ShapeDtypeStruct`s that describes every element of `ds` (a MapDataset
    or an IterDataset), worked out from the graph without reading or transforming an element.

    Raises NotImplementedError, naming the node's class, where a node's elements cannot
    be known ahead (see the module docstring for the rules)."""
    if _has_own_hook(ds):
        return ds._element_spec
    for cls in type(ds).__mro__:
        rule = _rules().get(cls)
        if rule is not None:
            return rule(ds)
    raise NotImplementedError(f"`element_spec` inference is not implemented for {type(ds).__name__}")


def _has_own_hook(ds: Any) -> bool:
    """True where the class of `ds` defines Grain's `_element_spec` (aioloader's nodes do not)."""
    return any("_element_spec" in vars(cls) for cls in type(ds).__mro__)


@functools.cache
def _rules() -> dict[type, Rule]:
    """Each of aioloader's node classes with a spec, and how its spec is made.

    Looked up along the class's MRO, so a subclass has its base's rule. Built on first
    use: the dataset modules load only when a spec is asked for."""
    from aioloader._dataset import (
        batching,
        cache,
        interleave,
        iter_base,
        iter_mapping,
        iter_mixing,
        iter_repeat,
        limit,
        mapping,
        mixing,
        parallel,
        prefetch,
        rebatch,
        repeat,
        shuffle,
        slicing,
        sources,
        thread_prefetch,
        window_shuffle,
        zipping,
    )
    from aioloader._dataset.base import _WithSeedMapDataset

    same_as_parent = (
        slicing.SliceMapDataset,
        shuffle.ShuffleMapDataset,
        repeat.RepeatMapDataset,
        mapping.FilterMapDataset,
        _WithSeedMapDataset,
        window_shuffle.WindowShuffleMapDataset,
        parallel.ToIterDataset,
        prefetch.PrefetchIterDataset,
        iter_mapping.FilterIterDataset,
        iter_base._WithSeedIterDataset,
        limit.LimitIterDataset,
        iter_repeat.RepeatIterDataset,
        cache.CacheIterDataset,
        thread_prefetch.ThreadPrefetchIterDataset,
        window_shuffle.WindowShuffleIterDataset,
    )
    mapped = (
        mapping.MapMapDataset,
        mapping.RandomMapMapDataset,
        mapping.MapWithIndexMapDataset,
        iter_mapping.MapIterDataset,
        iter_mapping.RandomMapIterDataset,
        iter_mapping.MapWithIndexIterDataset,
    )
    rules: dict[type, Rule] = dict.fromkeys(same_as_parent, _parent_spec)
    rules.update(dict.fromkeys(mapped, _mapped_spec))
    rules.update(
        {
            sources.RangeMapDataset: lambda ds: ShapeDtypeStruct(shape=(), dtype=np.int64),
            mixing._SelectionMapDataset: lambda ds: get_element_spec(ds._inputs[0]),
            iter_mixing.MixedIterDataset: lambda ds: get_element_spec(ds._inputs[0]),
            interleave.InterleaveIterDataset: lambda ds: get_element_spec(ds._datasets[0]),
            zipping.ZipMapDataset: _zipped_spec,
            zipping.ZipIterDataset: _zipped_spec,
            batching.BatchMapDataset: _batch_map_spec,
            iter_mapping.BatchIterDataset: _batch_iter_spec,
            rebatch.RebatchIterDataset: _rebatch_spec,
            prefetch.DevicePutIterDataset: _device_put_spec,
        }
    )
    return rules


def _parent_spec(ds: Any) -> Any:
    return get_element_spec(ds._parent)


def _zipped_spec(ds: Any) -> tuple[Any, ...]:
    return tuple(get_element_spec(parent) for parent in ds._parents)


def _mapped_spec(ds: Any) -> Any:
    """The transform's `output_spec` of the parent's spec (checked before the parent, as in Grain)."""
    kind = getattr(ds, "_method", None) or ds._kind  # IterDatasets name the method, MapDatasets the kind
    output_spec = getattr(_transform_of(ds._function, kind), "output_spec", None)
    if output_spec is None:
        raise ValueError(
            f"Cannot infer the element spec after `{kind}({ds._what})`: the transform does not "
            f"implement `output_spec`. Define `output_spec(self, input_spec)`, returning the spec "
            "of its output for `input_spec`, to enable element spec inference."
        )
    return output_spec(get_element_spec(ds._parent))


def _transform_of(function: Any, kind: str) -> Any:
    """The object the user gave to `kind` (`map`, ...), from the function the node calls:
    a transform object's bound method (`Tokenize().map`) gives back the object."""
    base, grain_name, method = KINDS[kind]
    owner = getattr(function, "__self__", None)
    if not inspect.ismethod(function) or not (isinstance(owner, base) or is_grain(owner, grain_name)):
        return function
    if function == getattr(owner, method, None):  # the very method `resolve` took from it
        return owner
    return function


def _batch_map_spec(ds: Any) -> Any:
    from aioloader._operations.batching import stack

    batch_fn = None if ds._combine is stack else ds._combine
    return _batched(get_element_spec(ds._parent), ds._size, ds._drop, batch_fn)


def _batch_iter_spec(ds: Any) -> Any:
    batch = ds._batch
    return _batched(get_element_spec(ds._parent), batch.batch_size, batch.drop_remainder, batch.batch_fn)


def _batched(spec: Any, batch_size: int, drop_remainder: bool, batch_fn: Any) -> Any:
    """`spec` batched by `batch_size` with `batch_fn` (None for the default stacking)."""
    if isinstance(batch_fn, functools.partial):
        batch_fn = batch_fn.func
    if batch_fn is not None and callable(batch_fn) and hasattr(batch_fn, "output_spec"):
        return batch_fn.output_spec(spec, batch_size, drop_remainder)
    if batch_fn is not None and not _is_grain_make_batch(batch_fn):
        raise NotImplementedError("Element spec inference is not supported with custom batching functions")
    leading = batch_size if drop_remainder else None  # the last batch may be shorter
    return _map_leaves(lambda leaf: ShapeDtypeStruct(shape=(leading, *leaf.shape), dtype=leaf.dtype), spec)


def _is_grain_make_batch(batch_fn: Any) -> bool:
    """True for Grain's own default batching function, given explicitly."""
    return getattr(batch_fn, "__name__", None) == "make_batch" and str(
        getattr(batch_fn, "__module__", "")
    ).startswith("grain.")


def _rebatch_spec(ds: Any) -> Any:
    """Each leaf's first dimension replaced by the rebatch's `batch_size`; the leaf keeps its type."""

    def rebatched(leaf: Any) -> Any:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            return leaf
        return type(leaf)(shape=(ds._batch_size, *leaf.shape[1:]), dtype=leaf.dtype)

    return _map_leaves(rebatched, get_element_spec(ds._parent))


def _device_put_spec(ds: Any) -> Any:
    raise ValueError(
        "Cannot infer the element spec after `device_put`: it maps the elements with a function "
        "that does not implement `output_spec` (as in Grain's `device_put`)."
    )


def _map_leaves(function: Callable[[Any], Any], tree: Any) -> Any:
    """`tree` with `function` applied to each leaf, through dicts, lists and tuples (named
    or not); None is an empty subtree, as in `jax.tree_util`."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        items = [(key, _map_leaves(function, tree[key])) for key in _key_order(tree)]
        if isinstance(tree, collections.defaultdict):
            return collections.defaultdict(tree.default_factory, items)
        return collections.OrderedDict(items) if isinstance(tree, collections.OrderedDict) else dict(items)
    if isinstance(tree, list):
        return [_map_leaves(function, item) for item in tree]
    if isinstance(tree, tuple):
        items = [_map_leaves(function, item) for item in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    return function(tree)


def _key_order(tree: dict[Any, Any]) -> list[Any]:
    """A dict's keys sorted as `jax.tree_util` sorts them; an OrderedDict keeps its order."""
    if isinstance(tree, collections.OrderedDict):
        return list(tree)
    try:
        return sorted(tree)
    except TypeError:  # keys of mixed types: in the order they came
        return list(tree)

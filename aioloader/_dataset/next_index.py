"""`get_next_index(iterator)` and `set_next_index(iterator, index)`: Grain's
`grain.experimental` functions, for the iterators of aioloader's Dataset API.

The index is Grain's: for the iterator of `MapDataset.to_iter_dataset()` (and of
`iter(map_dataset)`), how many indices of the MapDataset were consumed, the `None`
holes of a filter included, so `set_next_index(it, i)` makes element `i` (or the first
one after it that is not a hole) the next; it must be in `[0, len(ds)]`, else an
IndexError. The transformations after it answer as Grain's iterators do:

* `map`, `prefetch`, `mp_prefetch`, `seed`, `device_put` and `ThreadPrefetchIterDataset`:
  the parent's index;
* `batch(n)`: `ceil(parent's index / n)`; setting `i` sets the parent to `i * n`;
* `random_map` and `map_with_index`: the count of elements they gave (the same as the
  parent's index where nothing was dropped before them); setting sets the parent too;
* `LimitIterDataset`: the count of elements it gave; setting sets the parent too;
* `InterleaveIterDataset` of a single dataset: that dataset's index (0 before it opens).

Everything else (a filter after `to_iter_dataset`, a mix, a window shuffle, a packer, a
flat map, an interleave of several datasets, a user's own IterDataset) raises
NotImplementedError, as Grain's do (with a message naming the transformation here).

Both work through the iterator's own state: the index is read from `get_state()`, and
`set_next_index` is `set_state()` with the positions replaced, so what was read ahead is
dropped and the worker count (`prefetch(n)`) changes nothing; the pipeline's structure
(which node joined the parallel part, the batch sizes) comes from the iterator's dataset.

Deliberate differences from Grain: an index out of range is refused before anything
changes (Grain's iterator keeps the bad index), `index` must be an int (a TypeError
naming it), an object that is not an aioloader Dataset iterator is a TypeError
(Grain's raises AttributeError). After the end, an interleave of one dataset
still answers that dataset's index, and can be set back (Grain's answers 0, and its
`set_next_index` fails an assertion).

One difference left: after the end of a MapDataset whose last indices are `None` holes,
the index is the one after the last element given, not the length as in Grain's (the
engine's state stops there; it resumes to the same nothing).
"""

from __future__ import annotations

import copy
from typing import Any

from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.interleave import InterleaveIterDataset
from aioloader._dataset.iter_base import IterDataset, _WithSeedIterDataset
from aioloader._dataset.iter_mapping import (
    BatchIterDataset,
    MapIterDataset,
    MapWithIndexIterDataset,
    RandomMapIterDataset,
)
from aioloader._dataset.iterator import AsyncDatasetIterator, DatasetIterator
from aioloader._dataset.limit import LimitIterDataset
from aioloader._dataset.parallel import ToIterDataset
from aioloader._dataset.prefetch import DevicePutIterDataset, PrefetchIterDataset
from aioloader._dataset.stages import state_fields
from aioloader._dataset.thread_prefetch import ThreadPrefetchIterDataset

State = dict[str, Any]
Iterator = DatasetIterator[Any] | AsyncDatasetIterator[Any]

# Nodes whose iterator's index is the parent's, and that add no state of their own.
_PASS_THROUGH = (MapIterDataset, PrefetchIterDataset, _WithSeedIterDataset, DevicePutIterDataset)
_COUNTING = (RandomMapIterDataset, MapWithIndexIterDataset)  # in order: {"index": count}


def get_next_index(iterator: Iterator) -> int:
    """The index of the element `iterator` gives next (see the module docstring)."""
    dataset = _dataset_of(iterator)
    return _get(dataset, iterator.get_state()["dataset"])


def set_next_index(iterator: Iterator, index: int) -> None:
    """Make `iterator` give the element at `index` next (see the module docstring)."""
    dataset = _dataset_of(iterator)
    index = require_int("index", index)
    state = iterator.get_state()
    # Every check runs on the copy: a refused index leaves the iterator as it was.
    state["dataset"] = _set(dataset, copy.deepcopy(state["dataset"]), index)
    iterator.set_state(state)


def _dataset_of(iterator: Any) -> IterDataset[Any]:
    if not isinstance(iterator, (DatasetIterator, AsyncDatasetIterator)):
        raise TypeError(
            "`iterator` must be an iterator of an aioloader IterDataset or MapDataset "
            f"(`iter(ds)`), got {type(iterator).__name__}."
        )
    dataset: IterDataset[Any] = iterator._dataset  # the graph: which nodes joined the part
    return dataset


def _get(dataset: Any, state: State) -> int:
    """The next index at `dataset`, whose stage's state is `state`."""
    dataset = _skip_pass_through(dataset)
    if isinstance(dataset, (MapDataset, ToIterDataset)):
        return _position(state)
    if isinstance(dataset, BatchIterDataset):
        size = _batch_size(dataset)
        return -(-_get(dataset.parents[0], state) // size)  # ceil, as Grain's
    if isinstance(dataset, _COUNTING):
        if state.get("stage") == "parallel":  # joined the part: nothing dropped before it
            return _get(dataset.parents[0], state)
        return int(state["index"])
    if isinstance(dataset, LimitIterDataset):
        (given,) = state_fields(state, "limit", ("given",))
        return int(given)
    if isinstance(dataset, ThreadPrefetchIterDataset):  # the parent's, under a state of its own
        (parent,) = state_fields(state, "thread_prefetch", ("parent",))
        return _get(dataset.parents[0], parent)
    if isinstance(dataset, InterleaveIterDataset):
        return _get_interleave(dataset, state)
    raise _unsupported(dataset, "get_next_index")


def _set(dataset: Any, state: State, index: int) -> State:
    """`state` (a copy, changed in place) with `dataset`'s next index set to `index`."""
    dataset = _skip_pass_through(dataset)
    if isinstance(dataset, (MapDataset, ToIterDataset)):
        return _set_position(dataset, state, index)
    if isinstance(dataset, BatchIterDataset):
        return _set(dataset.parents[0], state, index * _batch_size(dataset))
    if isinstance(dataset, _COUNTING):
        if state.get("stage") == "parallel":
            return _set(dataset.parents[0], state, index)
        state["parent"] = _set(dataset.parents[0], state["parent"], index)
        state["index"] = index
        return state
    if isinstance(dataset, LimitIterDataset):
        state["parent"] = _set(dataset.parents[0], state["parent"], index)
        state["given"] = index
        return state
    if isinstance(dataset, ThreadPrefetchIterDataset):
        state["parent"] = _set(dataset.parents[0], state["parent"], index)
        return state
    if isinstance(dataset, InterleaveIterDataset):
        return _set_interleave(dataset, state, index)
    raise _unsupported(dataset, "set_next_index")


def _skip_pass_through(dataset: Any) -> Any:
    while isinstance(dataset, _PASS_THROUGH):
        dataset = dataset.parents[0]
    return dataset


def _batch_size(dataset: BatchIterDataset) -> int:
    return int(dataset._batch.batch_size)


def _position(state: State) -> int:
    """The records a parallel part consumed: the sampler's index in its loader's state."""
    (loader,) = state_fields(state, "parallel", ("loader",))
    return int(loader["position"]["index"])


def _set_position(dataset: MapDataset[Any] | ToIterDataset[Any], state: State, index: int) -> State:
    source = dataset if isinstance(dataset, MapDataset) else dataset.parents[0]
    length = len(source)
    if not 0 <= index <= length:
        # Grain's error and message (its iterator's `set_state`), naming the argument too.
        raise IndexError(
            f"Checkpoint `next_index` {index} is out of range for dataset of length {length} "
            "(`index` of set_next_index must be between 0 and the length)."
        )
    (loader,) = state_fields(state, "parallel", ("loader",))
    # The skips are non-zero only mid-way through a flat map, which Grain cannot set either.
    loader["position"] = {**loader["position"], "index": index, "skip_elements": 0, "skip_outputs": 0}
    return state


def _single_dataset(dataset: InterleaveIterDataset[Any], what: str) -> Any:
    datasets = dataset._datasets
    if len(datasets) != 1:
        raise NotImplementedError(
            f"{what} is not supported for an InterleaveIterDataset of {len(datasets)} datasets, "
            "as in Grain: only of one."
        )
    return datasets[0]


def _get_interleave(dataset: InterleaveIterDataset[Any], state: State) -> int:
    inner = _single_dataset(dataset, "get_next_index")
    (slots,) = state_fields(state, "interleave", ("slots",))
    if slots[0] is None:
        return 0  # not opened yet, as Grain's
    _, inner_state, _ = slots[0]
    return _get(inner, inner_state)


def _set_interleave(dataset: InterleaveIterDataset[Any], state: State, index: int) -> State:
    inner = _single_dataset(dataset, "set_next_index")
    (slots,) = state_fields(state, "interleave", ("slots",))
    inner_state = slots[0][1] if slots[0] is not None else _fresh_state(inner)
    # Open again, even if it had ended: the index may be before its end.
    slots[0] = [0, _set(inner, inner_state, index), False]
    state.update(turn=0, opened=1)
    return state


def _fresh_state(dataset: Any) -> State:
    """The state of a new iterator of `dataset` (a MapDataset is read as `to_iter_dataset()`)."""
    iterable = dataset.to_iter_dataset() if isinstance(dataset, MapDataset) else dataset
    # aioloader's iterator whatever `__iter__` says: a user's would be refused by `_set` anyway.
    with DatasetIterator(iterable) as iterator:  # no thread starts before a first `next()`
        state: State = iterator.get_state()["dataset"]
    return state


def _unsupported(dataset: Any, what: str) -> NotImplementedError:
    return NotImplementedError(
        f"{what} is not supported for an iterator of {type(dataset).__name__}, as in Grain: only "
        "`to_iter_dataset()` and the map, random_map, map_with_index, batch, limit, prefetch "
        "and single-dataset interleave after it have a next index."
    )

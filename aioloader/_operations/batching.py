"""Batching: stacking elements leaf by leaf, and the runs of batches the workers make.

Default batching follows Grain (and `jax.tree_util`): elements that are
dicts, tuples (named or not) or lists of numpy arrays and scalars become one
structure of the same shape whose leaves are the stacked leaves. Dicts are
matched by key, whatever order their keys come in, and the batch's keys are
sorted, as `jax.tree_util` orders them. Leaves that are `str` or `bytes`
become a 1-D numpy array of dtype `object` holding the very objects: numpy's
`U`/`S` arrays would strip trailing NUL characters and bytes. None is an
empty subtree, as in `jax.tree_util`: a batch of Nones is None. Elements of
different structure (None beside a value among them) are a ValueError, the
type Grain raises.
`Batch(batch_fn=...)` replaces all this.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from aioloader._common.failures import Failure
from aioloader._common.positions import EvenPositions, Position
from aioloader._operations.apply import Run
from aioloader._operations.transforms import Batch
from aioloader._sampling.metadata import element_rng, make_rng


def stack(elements: Sequence[Any], path: str = "element") -> Any:
    """Stack `elements` leaf by leaf into one batch (numpy arrays at the leaves)."""
    first = elements[0]
    if isinstance(first, dict):
        return _stack_dicts(elements, path)
    if first is None:
        _check_nones(elements, path)
        return None
    if isinstance(first, (tuple, list)):
        for i, element in enumerate(elements):
            if type(element) is not type(first) or len(element) != len(first):
                raise ValueError(
                    f"cannot batch: {path} of element {i} is not a {type(first).__name__} of {len(first)}"
                )
        leaves = [stack([e[k] for e in elements], f"{path}[{k}]") for k in range(len(first))]
        if isinstance(first, list):
            return leaves
        return type(first)(*leaves) if hasattr(first, "_fields") else tuple(leaves)
    return _stack_leaves(elements, path)


def _stack_dicts(elements: Sequence[Any], path: str) -> dict[Any, Any]:
    """Dicts matched by key (in any order); the batch has the keys sorted, as in JAX."""
    keys = _sorted_keys(elements[0])
    columns = _columns(elements, keys)
    if columns is None:
        wanted = set(keys)
        for i, element in enumerate(elements):
            if not isinstance(element, dict) or element.keys() != wanted:
                raise ValueError(f"cannot batch: {path} of element {i} is not a dict with keys {keys}")
        columns = [[e[key] for e in elements] for key in keys]
    return {key: stack(column, f"{path}[{key!r}]") for key, column in zip(keys, columns, strict=True)}


def _columns(elements: Sequence[Any], keys: list[Any]) -> list[list[Any]] | None:
    """Each key's values, if every element is a plain dict with exactly `keys`; else None.

    Checked in C loops (a third of the cost of comparing each element's keys with
    a set: 128 dicts of two keys, 17 us on 3.13t): dicts of one length that all
    hold every key hold those keys alone. Plain dicts only: a subclass's
    `__getitem__` (a `defaultdict`'s) could answer for a key it lacks."""
    if set(map(type, elements)) != {dict} or set(map(len, elements)) != {len(keys)}:
        return None
    try:
        return [list(map(operator.itemgetter(key), elements)) for key in keys]
    except KeyError:
        return None


def _sorted_keys(mapping: dict[Any, Any]) -> list[Any]:
    try:
        return sorted(mapping)
    except TypeError:  # keys of several types: keep the first element's order
        return list(mapping)


def _stack_leaves(elements: Sequence[Any], path: str) -> np.ndarray:
    kinds = set(map(type, elements))
    if len(kinds) == 1:
        stacked = _stack_alike(kinds.pop(), elements)
        if stacked is not None:
            return stacked
    return _stack_mixed(elements, path)


def _stack_alike(kind: type, elements: Sequence[Any]) -> np.ndarray | None:
    """Leaves all of one type `kind`, stacked in one numpy call where that gives
    exactly what stacking them one by one gives (else None).

    Plain arrays go to `np.stack` as they are (it makes each an array anyway);
    numeric ones to `np.array` of their list, which promotes their dtypes as
    `np.stack` does and copies them alike at a third of its cost per array
    (128 rows of 32 floats: 15 against 40 us on CPython 3.13t). Scalars of
    one type have one dtype each, so `np.asarray` of their list is their
    stack; Python ints only if the list is of the default int (each fits in
    it: a larger one makes numpy pick another dtype for it alone).
    """
    if kind is np.ndarray:
        try:
            return _stack_arrays(elements)
        except ValueError:
            return None  # different shapes: the one-by-one path says which
    if kind is int:
        stacked = np.asarray(elements)
        return stacked if stacked.dtype == np.dtype(int) else None  # what `np.asarray` makes of one that fits
    # One type in, one dtype out (no numpy at import: a subinterpreter imports this module).
    if issubclass(kind, (bool, float, complex, np.number, np.bool_)):
        return np.asarray(elements)
    return None


def _stack_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """`np.stack(arrays)`, through `np.array` where that is the same and faster: arrays of
    numbers (not objects, strings or records, whose elements numpy might look into).

    The result must be of numbers too: after a first array of numbers, `np.array` makes
    an object array of a later datetime or record array, which `np.stack` refuses."""
    first = arrays[0]
    if first.dtype.kind in "biufc":
        stacked = np.array(arrays)
        if stacked.dtype.kind in "biufc" and stacked.shape == (len(arrays), *first.shape):
            return stacked
    return np.stack(arrays)


def _check_nones(elements: Sequence[Any], path: str) -> None:
    """None in every element or in none (an empty subtree is structure), else a
    ValueError naming the first element that differs from element 0."""
    none = elements[0] is None
    for i, element in enumerate(elements):
        if (element is None) is not none:
            if none:
                raise ValueError(f"cannot batch: {path} of element {i} is not None, as element 0's is")
            raise ValueError(f"cannot batch: {path} of element {i} is None, and element 0's is not")


def _stack_mixed(elements: Sequence[Any], path: str) -> np.ndarray:
    _check_nones(elements, path)
    if any(isinstance(e, (str, bytes)) for e in elements):
        exact = np.empty(len(elements), dtype=object)
        for i, element in enumerate(elements):  # one by one: numpy converts nothing
            exact[i] = element
        return exact
    try:
        return np.stack([np.asarray(e) for e in elements])
    except ValueError as error:
        shapes = sorted({np.shape(e) for e in elements})
        raise ValueError(f"cannot batch: {path} has different shapes {shapes}") from error


class ElementColumns(Protocol):
    """Where the elements to be batched stand (elements of a run, in output order), asked
    for many elements at once: a batch plan asks twice per batch, a chunk holds many."""

    def positions_before(self, js: Sequence[int]) -> list[Position]:
        """The position of each element `j` itself."""
        ...

    def positions_after(self, js: Sequence[int]) -> list[Position]:
        """The position just past each element `j`."""
        ...

    def record_indices(self, js: Sequence[int]) -> list[int]:
        """The index of the record each element `j` came from."""
        ...

    def record_rngs(self, js: Sequence[int]) -> list[np.random.Generator | None]:
        """Those records' generators, where one was made."""
        ...


class BatchPlan:
    """Batches to form: `groups[b]` are the elements of batch `b`.

    `before[b]` is the position of its first element and `after[b]` the
    position just after its last; `first[b]`/`last[b]` the global index of
    its first and last record, and `last_rng[b]` the last record's generator
    if one was made (a batch uses its last record's generator, as in Grain).

    A batch that starts inside its last record's elements (a flat map's, after
    a batch that ended there) has a generator of its own instead
    (`element_rng`, from the element it starts at: `inside[b]`, 0 for the
    others; None when no batch does). Sharing the record's would make its draws
    depend on the batches before it, which a resume at its start does not run
    again: resumed there, the random operations after `Batch` drew otherwise.
    Grain gives no generator to a flat map's elements at all.
    """

    __slots__ = ("after", "before", "first", "groups", "inside", "last", "last_rng")

    def __init__(
        self,
        groups: list[list[Any]],
        before: list[Position],
        after: Sequence[Position],
        first: Sequence[int],
        last: list[int],
        last_rng: list[np.random.Generator | None],
    ) -> None:
        self.groups, self.before, self.after = groups, before, after
        self.first, self.last, self.last_rng = first, last, last_rng
        self.inside: list[int] | None = None

    @classmethod
    def empty(cls) -> BatchPlan:
        """No batch at all."""
        return cls([], [], [], [], [], [])

    @classmethod
    def cut(
        cls, items: list[Any], count: int, size: int, columns: ElementColumns, skip_outputs: int
    ) -> BatchPlan:
        """Batches of `size` from the first `count` of `items` (the last one shorter if
        `count` is not a multiple); the first skips `skip_outputs` outputs (resuming inside it).

        The one place batches are cut: on the workers for the fused plan, by the
        tail for the tail plan.
        """
        firsts = range(0, count, size)
        lasts = [min(b + size, count) - 1 for b in firsts]
        before = columns.positions_before(firsts)
        if before:
            index, skip_elements, _ = before[0]
            before[0] = (index, skip_elements, skip_outputs)
        plan = cls(
            groups=[items[b : e + 1] for b, e in zip(firsts, lasts, strict=True)],
            before=before,
            after=columns.positions_after(lasts),
            first=columns.record_indices(firsts),
            last=columns.record_indices(lasts),
            last_rng=columns.record_rngs(lasts),
        )
        inside = [
            skip if first == last else 0
            for (_, skip, _), first, last in zip(before, plan.first, plan.last, strict=True)
        ]
        plan.inside = inside if any(inside) else None
        return plan

    @classmethod
    def of_records(
        cls,
        items: list[Any],
        count: int,
        size: int,
        start: int,
        indices: Sequence[int],
        rngs: Sequence[np.random.Generator | None] | None,
        skip_outputs: int,
    ) -> BatchPlan:
        """`cut` of the first `count` of `items` when element `j` is the whole record at walk
        position `start + j`, of global index `indices[j]` (a fused chunk): the same plan,
        with its positions computed as arithmetic (on a chunk of small records, the general
        `cut` cost as much as a fifth of the loader's own work)."""
        if not count:
            return cls.empty()
        firsts = range(0, count, size)
        ends = [*range(size, count, size), count]  # each batch's end, exclusive
        before = [(start + b, 0, 0) for b in firsts]
        before[0] = (start, 0, skip_outputs)
        return cls(
            groups=[items[b:e] for b, e in zip(firsts, ends, strict=True)],
            before=before,
            after=EvenPositions(start, size, len(ends), start + count),
            first=indices[0:count:size],
            last=[indices[e - 1] for e in ends],
            last_rng=[None] * len(ends) if rngs is None else [rngs[e - 1] for e in ends],
        )


class BatchRun(Run):
    """Batches, then what the operations after `Batch` made of them."""

    __slots__ = ("plan", "skip_outputs")

    def __init__(self, plan: BatchPlan, batch: Batch, skip_outputs: int, failure: Failure | None) -> None:
        """Stack each group of `plan`; `failure` (from the records) comes after these batches."""
        super().__init__([])
        self.plan, self.skip_outputs, self.failure = plan, skip_outputs, failure
        combine = batch.batch_fn or stack
        for b, group in enumerate(plan.groups):
            try:
                self.items.append(combine(group))
            except Exception as error:
                self.failure = self.blame(b, error, "Batch" if batch.batch_fn is None else "Batch.batch_fn")
                break

    def rng_of(self, origin: int, seed: int | None) -> np.random.Generator:
        plan = self.plan
        if plan.inside is not None and plan.inside[origin] and seed is not None:
            # Its own generator (see `BatchPlan`), made once: the operations after this one
            # draw on from it. (A foreign sampler's generators, with no seed, stay shared.)
            element, plan.inside[origin] = plan.inside[origin], 0
            plan.last_rng[origin] = element_rng(seed, plan.last[origin], element)
        rng = plan.last_rng[origin]
        if rng is None:
            rng = plan.last_rng[origin] = make_rng(seed, plan.last[origin])
        return rng

    def record_index(self, origin: int) -> int:
        return self.plan.first[origin]

    def blame(self, origin: int, error: BaseException, what: str) -> Failure:
        return Failure.at_batch(error, what, self.plan.first[origin], self.plan.last[origin])

    def positions_after(self) -> Sequence[Position]:
        """The position after each output, so a checkpoint can resume just past it.

        After the last output of a batch that is the batch's end; after an
        earlier one it is the batch's start with one more output to skip.
        """
        if self.origins is None:  # one output per batch
            after = self.plan.after
            return after if len(after) == len(self.items) else after[: len(self.items)]
        plan, origins = self.plan, self.origins
        positions: list[Position] = []
        ordinal, previous = 0, -1
        for j, origin in enumerate(origins):
            ordinal = ordinal + 1 if origin == previous else 1
            previous = origin
            if j + 1 < len(origins) and origins[j + 1] == origin:
                index, skip, done = plan.before[origin]
                positions.append((index, skip, done + ordinal))
            else:
                positions.append(plan.after[origin])
        return positions

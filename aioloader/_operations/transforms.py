"""The operations a pipeline applies, in list order, and their compiled form.

The public classes mirror Grain's: subclass `MapTransform` and define `map`,
and so on. A plain callable counts as a map; an `async def` map (a coroutine
function, or a transform whose `map` is one) is awaited on the event loop.

Each worker thread gets its own deep copy of the operations, so the state a
transform holds belongs to the thread that uses it (on free-threaded CPython
a dict read by many threads is a slow path). To share a transform's state
instead, define `__deepcopy__(self, memo)` to return `self`, or to copy all
but the large read-only part.
"""

from __future__ import annotations

import abc
import inspect
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from aioloader._common.calls import stray_stop
from aioloader._common.failures import note
from aioloader._common.validation import bool_field, int_field
from aioloader._operations.copying import deep_copy


class MapTransform(abc.ABC):
    """Maps one element to one element."""

    @abc.abstractmethod
    def map(self, element: Any) -> Any:
        """Return the transformed element."""


class RandomMapTransform(abc.ABC):
    """Maps one element to one element with the record's own generator."""

    @abc.abstractmethod
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """Return the transformed element; `rng` belongs to this record alone."""


class TfRandomMapTransform(abc.ABC):
    """Grain's `TfRandomMap`: a random map whose method is `np_random_map`. A `DataLoader`
    runs it as a RandomMapTransform, with the record's own generator (as Grain's does);
    the Dataset API does not take it (Grain's neither)."""

    @abc.abstractmethod
    def np_random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """Return the transformed element; `rng` belongs to this record alone."""


class MapWithIndexTransform(abc.ABC):
    """Maps one element and its index to one element: for `MapDataset.map_with_index` and
    `IterDataset.map_with_index` (as in Grain, a `DataLoader` does not take it)."""

    @abc.abstractmethod
    def map_with_index(self, index: int, element: Any) -> Any:
        """Return the transformed element; `index` is the element's index in the dataset."""


class FilterTransform(abc.ABC):
    """Keeps the elements for which `filter` is true."""

    @abc.abstractmethod
    def filter(self, element: Any) -> bool:
        """Return True to keep `element`."""


class FlatMapTransform(abc.ABC):
    """Maps one element to any number of elements, kept in order.

    A record's elements are taken whole before they go on, so a generator without end
    never delivers: set `max_fan_out` (an int, Grain's attribute) to bound them, and a
    record that gives more is an error naming it. A `close()` stops a generator that is
    still going.
    """

    @abc.abstractmethod
    def flat_map(self, element: Any) -> Iterable[Any]:
        """Return (or yield) the elements that replace `element`."""


@dataclass(frozen=True)
class Batch:
    """Groups consecutive elements into batches of `batch_size`.

    By default the elements' leaves (through dicts, tuples and lists) are
    stacked with numpy, as in Grain; dicts are matched by key in any order
    and batched with sorted keys, as `jax.tree_util` does. `str` and `bytes`
    leaves become 1-D numpy arrays of dtype `object` holding the very
    objects, since `S`/`U` arrays strip trailing NULs. Elements of different
    structure are a ValueError. `batch_fn(list_of_elements)` replaces all
    this. The last batch is smaller unless `drop_remainder=True` drops it.
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[list[Any]], Any] | None = None

    def __post_init__(self) -> None:
        int_field(self, "batch_size", minimum=1)
        bool_field(self, "drop_remainder")
        if self.batch_fn is not None and not callable(self.batch_fn):
            raise TypeError(f"`batch_fn` must be callable or None, got {self.batch_fn!r}.")
        if is_async(self.batch_fn):
            raise TypeError(
                f"`batch_fn` must not be an `async def` function (only a map may be), got {self.batch_fn!r}."
            )


class Kind(Enum):
    """What an operation does to the stream of elements."""

    MAP = "map"
    RANDOM_MAP = "random_map"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    ASYNC_MAP = "async_map"


class Op(NamedTuple):
    """One per-element operation, as the workers run it.

    `target` is the user's object (the part copied per thread); `method`
    names the attribute to call on it, or is empty for a plain callable.
    `name` is where it stands in the user's list (`operations[2]`) and
    `what` says what it is (`Tokenize.map`). `rng`, for a random map of the
    Dataset API, makes what it is given from a record's index: its own
    generator, or the index itself for `map_with_index`; without it, the
    random operations share each record's generator.
    """

    kind: Kind
    target: Any
    method: str
    name: str
    what: str
    rng: Callable[[int], Any] | None = None
    grain_label: str | None = None  # how Grain's warnings name it (the Dataset API's filters)

    @property
    def label(self) -> str:
        """How error messages name the operation: `operations[2] (Tokenize.map)`."""
        return f"{self.name} ({self.what})"

    def function(self) -> Callable[..., Any]:
        """The callable to apply, bound to this copy's `target`."""
        function: Callable[..., Any] = getattr(self.target, self.method) if self.method else self.target
        return function

    @property
    def one_to_one(self) -> bool:
        """True when every input element gives exactly one output element."""
        return self.kind in (Kind.MAP, Kind.RANDOM_MAP, Kind.ASYNC_MAP)


class Operations(NamedTuple):
    """The user's operation list split at its `Batch`: `before`, the batch, `after`."""

    before: list[Op]
    batch: Batch | None
    after: list[Op]

    def describe(self) -> list[str]:
        """What identifies the operations, for checkpoint states."""
        batch = [] if self.batch is None else [f"batch({self.batch.batch_size},{self.batch.drop_remainder})"]
        return [_described(op) for op in self.before] + batch + [_described(op) for op in self.after]

    def for_worker(self) -> Operations:
        """A deep copy for one worker thread, naming the operation that cannot be copied.

        One memo serves the whole list, so operations that share an object
        share its copy too.
        """
        memo: dict[int, Any] = {}

        def copy_of(op: Op) -> Op:
            try:
                target = deep_copy(op.target, memo)
            except Exception as error:
                # The copy's own error, as Grain raises its pickling's: the same `except` catches
                # it; a StopIteration, which would read as the end, as a RuntimeError from it.
                raised = stray_stop(error, f"deep-copying `{op.name}` ({op.what})")
                note(
                    raised,
                    f"`{op.name}` ({op.what}) cannot be deep-copied for a worker thread; "
                    f"define __deepcopy__ returning self to share it.",
                )
                if raised is error:
                    raise
                raise raised from error
            if type(target) is not type(op.target):  # a `__deepcopy__` that forgot its `return`
                raise TypeError(
                    f"`{op.name}` ({op.what}): copying it for a worker thread gave "
                    f"{type(target).__name__}, not a {type(op.target).__name__}; its __deepcopy__ "
                    "must return a copy, or self to share it."
                )
            return Op(op.kind, target, op.method, op.name, op.what, op.rng)

        return Operations([copy_of(op) for op in self.before], self.batch, [copy_of(op) for op in self.after])

    def claim(self) -> tuple[Operations, bool]:
        """These operations for one engine, whose consumer's thread may run them: the
        loader's own if no other engine holds them (then True: `settle` the claim before
        anything runs them, and `release` them when done), else a copy, so that two
        iterators of one loader, in two threads at once, never share a transform's state.

        The copy is made from the holder's pattern (see `settle`), which nothing runs, once
        the holder has settled; without a pattern, from the loader's own, which then only
        a holder at `worker_count=0` runs meanwhile. Copying only for a second engine
        spares the usual single iterator without workers a deep copy of a large transform."""
        with _claims:
            held = _claimed.get(id(self))
            if held is None:
                _claimed[id(self)] = _Claim(self)
                return self, True
        held.settled.wait()  # one deep copy on the holder's thread, before it runs these
        return (self if held.pattern is None else held.pattern).for_worker(), False

    def settle(self, pattern: Operations | None) -> None:
        """The claim's `pattern`: a copy that the holder's workers copy in turn, made before
        its consumer's thread runs these, and never run (None: the holder makes none).
        Another engine's claim waits for it, and copies it."""
        with _claims:
            held = _claimed.get(id(self))
        if held is not None and held.operations is self:
            held.pattern = pattern
            held.settled.set()

    def release(self) -> None:
        """Let another engine run these operations (after `claim` returned True)."""
        with _claims:
            held = _claimed.get(id(self))
            if held is None or held.operations is not self:
                return
            del _claimed[id(self)]
        held.settled.set()  # a claim waiting for the pattern copies these instead


class _Claim:
    """The loader's operations held by one engine, and its pattern once `settled`."""

    def __init__(self, operations: Operations) -> None:
        self.operations = operations
        self.pattern: Operations | None = None
        self.settled = threading.Event()


def _described(op: Op) -> str:
    """An operation's kind, and the seed of a Dataset's random map (its generators' own:
    another seed draws other numbers, so a state must not resume there)."""
    seed = getattr(op.rng, "seed", None)
    # A Dataset filter that marks what it drops runs as a map (see `filter_checks`): it is
    # described as the filter it is, so that states pass between runs with and without checks.
    kind: Kind = getattr(op.target, "stands_for", op.kind)
    return kind.value if seed is None else f"{kind.value}(seed={seed})"


# The operations that an engine holds, by id, each kept alive while claimed (an id is then
# never another object's: a claim that an engine failing in its constructor never released
# once made a later loader's operations, at the same address, look held: they were copied),
# with the engine's pattern for other engines to copy (see `claim`).
_claims = threading.Lock()
_claimed: dict[int, _Claim] = {}


class Prepared(NamedTuple):
    """An operation already resolved to its function, as the Dataset API hands its
    transformations to the engine: `kind` (MAP, RANDOM_MAP or FILTER), the function,
    how messages name it (`name`, `what`), and for a random map what it is given per
    record index (`rng`: its own generator, seeded as Grain seeds the transformation, or
    the index itself for `map_with_index`)."""

    kind: Kind
    function: Callable[..., Any]
    name: str
    what: str
    rng: Callable[[int], Any] | None = None
    grain_label: str | None = None  # see `Op`


def is_not_none(element: Any) -> bool:
    """The filter that drops the None holes a MapDataset's filter leaves (`to_iter_dataset`)."""
    return element is not None


# aioloader's base class, Grain's class of the same role (by name), the kind, the method.
_METHODS = (
    (MapTransform, "Map", Kind.MAP, "map"),
    (RandomMapTransform, "RandomMap", Kind.RANDOM_MAP, "random_map"),
    (TfRandomMapTransform, "TfRandomMap", Kind.RANDOM_MAP, "np_random_map"),
    (FilterTransform, "Filter", Kind.FILTER, "filter"),
    (FlatMapTransform, "FlatMap", Kind.FLAT_MAP, "flat_map"),
)
_GRAIN_MODULE = "grain._src.core.transforms"
# Grain's deprecated operations (`grain.python.MapOperation`, ...): each holds the user's
# function in a field and applied it to the whole stream of records; here each becomes
# the per-record operation of the same meaning. The class, the kind, the field, its successor.
_LEGACY = (
    ("MapOperation", Kind.MAP, "map_function", "MapTransform"),
    ("RandomMapOperation", Kind.RANDOM_MAP, "random_map_function", "RandomMapTransform"),
    ("FilterOperation", Kind.FILTER, "condition_function", "FilterTransform"),
)
_LEGACY_MODULES = ("grain._src.python.operations", "aioloader._operations.legacy")  # Grain's, ours


def _is_legacy(operation: Any, name: str) -> bool:
    """True for Grain's deprecated operation `name`, or aioloader's of that name."""
    return any(is_grain(operation, name, module) for module in _LEGACY_MODULES)


def is_grain(transform: Any, name: str, module: str = _GRAIN_MODULE) -> bool:
    """True for an instance of Grain's transform class `name` (`Map`, `Batch`, ...).

    Grain's classes are recognised by their module and name, so Grain need not be
    installed (nor imported) for aioloader to accept them."""
    return any(c.__module__ == module and c.__name__ == name for c in type(transform).__mro__)


def is_async(function: Any) -> bool:
    """True for an `async def` function or method, or an object whose `__call__` is one."""
    return _it_or_its_call(inspect.iscoroutinefunction, function)


def _is_generator_function(function: Any) -> bool:
    """True for a generator function or method, or an object whose `__call__` is one."""
    return _it_or_its_call(inspect.isgeneratorfunction, function)


def _it_or_its_call(test: Callable[[Any], bool], function: Any) -> bool:
    """`test` of a function, or of a callable object's `__call__`."""
    return test(function) or test(getattr(function, "__call__", None))  # noqa: B004 - an object's __call__


def refuse_class(name: str, operation: Any) -> None:
    """A transform class given where an instance belongs (`[Scale]` for `[Scale()]`) would be
    called on every element as a plain callable: a TypeError naming `name` instead."""
    bases = (
        MapTransform,
        RandomMapTransform,
        TfRandomMapTransform,
        MapWithIndexTransform,
        FilterTransform,
        FlatMapTransform,
        Batch,
    )
    if isinstance(operation, type) and (
        issubclass(operation, bases) or any(c.__module__ == _GRAIN_MODULE for c in operation.__mro__)
    ):
        raise TypeError(
            f"`{name}` is the class {operation.__name__}, not an instance: write {operation.__name__}()."
        )


def own_batch(operation: Any) -> Batch | None:
    """`operation` as aioloader's Batch if it is one (aioloader's or Grain's), else None."""
    if isinstance(operation, Batch):
        return operation
    if is_grain(operation, "Batch"):
        return Batch(operation.batch_size, operation.drop_remainder, operation.batch_fn)
    if _is_legacy(operation, "BatchOperation"):
        _deprecated("BatchOperation", "Batch")
        # Its default `batch_fn` is its own stacking, bound to it: stack as Batch does.
        batch_fn = getattr(operation, "batch_fn", None)
        default = getattr(batch_fn, "__func__", None) is getattr(type(operation), "_default_batch_fn", 0)
        return Batch(operation.batch_size, operation.drop_remainder, None if default else batch_fn)
    return None


def _deprecated(legacy: str, current: str) -> None:
    # Pointed at the user's line: the first frame outside this package.
    package, frame, level = os.path.dirname(os.path.dirname(__file__)), sys._getframe(1), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"Grain's {legacy} is deprecated (Grain logs an error for it): aioloader runs it as "
        f"{current}, which it is; write {current}.",
        DeprecationWarning,
        stacklevel=level,
    )


def compile_operations(operations: Iterable[Any]) -> Operations:
    """Check the user's `operations` (any iterable, taken as a list, as Grain takes
    it) and split them at the `Batch`."""
    if isinstance(operations, (str, bytes, dict)) or not isinstance(operations, Iterable):
        raise TypeError(
            f"`operations` must be a list or tuple of operations, got {type(operations).__name__}."
        )
    operations = list(operations)
    own = [own_batch(op) for op in operations]
    batches = [i for i, batch in enumerate(own) if batch is not None]
    if len(batches) > 1:
        raise ValueError(
            f"`operations` may hold at most one Batch, got {len(batches)} (at positions {batches})."
        )
    ops = [_compile_one(i, op) for i, op in enumerate(operations) if own[i] is None]
    if not batches:
        return Operations(ops, None, [])
    split = batches[0]
    return Operations(ops[:split], own[split], ops[split:])


def _compile_one(position: int, operation: Any) -> Op:
    name = f"operations[{position}]"
    if isinstance(operation, Prepared):
        kind = operation.kind
        if kind is Kind.MAP and inspect.iscoroutinefunction(operation.function):
            kind = Kind.ASYNC_MAP
        return Op(
            kind, operation.function, "", operation.name, operation.what, operation.rng, operation.grain_label
        )
    refuse_class(name, operation)
    if isinstance(operation, MapWithIndexTransform) or is_grain(operation, "MapWithIndex"):
        raise TypeError(
            f"`{name}` is a MapWithIndexTransform, which a DataLoader does not take (nor does Grain's): "
            f"use `MapDataset.map_with_index` or `IterDataset.map_with_index`, got {operation!r}."
        )
    for legacy, kind, field, current in _LEGACY:
        if _is_legacy(operation, legacy):
            _deprecated(legacy, current)
            return Op(kind, operation, field, name, f"{legacy}.{field}")
    for base, grain_name, kind, method in _METHODS:
        if isinstance(operation, base) or is_grain(operation, grain_name):
            what = f"{type(operation).__name__}.{method}"
            if is_async(getattr(operation, method)):
                if kind is not Kind.MAP:
                    raise TypeError(f"`{name}` ({what}) must not be `async def`: only a map may be awaited.")
                kind = Kind.ASYNC_MAP
            return Op(kind, operation, method, name, what)
    if callable(operation):
        what = getattr(operation, "__qualname__", type(operation).__name__)
        if _is_generator_function(operation):
            # Grain's DataLoader calls a plain callable with the whole stream of records (its
            # legacy operations); here it is a map, which would batch generator objects.
            raise TypeError(
                f"`{name}` ({what}) is a generator function: a plain callable is a map here, called "
                f"on each record, and its generators would be the records. Grain's legacy operations "
                f"took the whole stream: write a MapTransform, FilterTransform or FlatMapTransform."
            )
        return Op(Kind.ASYNC_MAP if is_async(operation) else Kind.MAP, operation, "", name, what)
    raise TypeError(
        f"`{name}` must be a MapTransform, RandomMapTransform, FilterTransform, FlatMapTransform, Batch "
        f"or a callable, got {operation!r}."
    )

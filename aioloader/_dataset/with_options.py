"""`WithOptionsIterDataset(parent, options)`: `DatasetOptions` for the whole pipeline
(Grain's `grain.experimental.WithOptionsIterDataset`).

The options apply to every transformation of the pipeline, before and after the node,
as in Grain: `iter()` merges every `WithOptionsIterDataset` of the graph first
(`pipeline_options`, the outer winning where two set a field) and compiles the pipeline
with the result. The elements are the parent's; only the filter checks change (see
`filter_checks`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import Any, TypeVar

from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.options import DatasetOptions
from aioloader._dataset.stages import Plan, Settings

T = TypeVar("T")


class WithOptionsIterDataset(IterDataset[T]):
    """The parent's elements, with `options` for the whole pipeline."""

    def __init__(self, parent: IterDataset[T], options: DatasetOptions) -> None:
        super().__init__(parent)
        self._parent: IterDataset[T] = require_iter_dataset("parent", parent)
        self.options = as_options(options)

    def _plan(self, settings: Settings) -> Plan:
        # `iter()` merged these already; a subgraph compiled later (an interleave's
        # datasets) adds its own below what is set from outside.
        merged = settings.options.merge(self.options)
        plan: Plan = self._parent._plan(dataclasses.replace(settings, options=merged))
        return plan

    def __repr__(self) -> str:
        return f"WithOptionsIterDataset({self._parent!r}, {self.options!r})"


def as_options(options: Any) -> DatasetOptions:
    """aioloader's `DatasetOptions`, or Grain's taken field by field (a shared library may
    build them with Grain's class); else a TypeError naming `options`."""
    if isinstance(options, DatasetOptions):
        return options
    fields = getattr(options, "_user_set_fields", None)
    if type(options).__name__ == "DatasetOptions" and isinstance(fields, set):
        return DatasetOptions(**{name: getattr(options, name) for name in fields})
    raise TypeError(f"`options` must be an aioloader.experimental.DatasetOptions, got {options!r:.200}.")


def pipeline_options(dataset: Any) -> DatasetOptions:
    """The options of every `WithOptionsIterDataset` in `dataset`'s graph, merged as Grain
    merges its iterators': a node's own over its parents', and of its parents the first
    over the later ones; and those of a pipeline being compiled around this one (a user's
    node whose `__iter__` iterates `dataset`) over all of them."""
    merged: dict[int, DatasetOptions] = {}
    stack: list[tuple[Any, bool]] = [(dataset, False)]
    while stack:  # post-order without recursion: a pipeline may be thousands of nodes deep
        node, expanded = stack.pop()
        if id(node) in merged:
            continue
        if expanded:
            merged[id(node)] = _own(node, merged)
            continue
        stack.append((node, True))
        stack += [(parent, False) for parent in reversed(getattr(node, "parents", ()))]
    outer = _outer.get()
    inner = merged[id(dataset)]
    return inner if outer is None else outer.merge(inner)


def _own(node: Any, merged: dict[int, DatasetOptions]) -> DatasetOptions:
    """`node`'s options over its parents' (merged already), the first parent over the rest."""
    options = DatasetOptions()
    for parent in getattr(node, "parents", ()):
        options = options.merge(merged[id(parent)])
    return node.options.merge(options) if isinstance(node, WithOptionsIterDataset) else options


# The options of the pipeline being compiled in this thread, for pipelines compiled inside it.
_outer: contextvars.ContextVar[DatasetOptions | None] = contextvars.ContextVar(
    "aioloader_options", default=None
)


@contextlib.contextmanager
def compiling_with(options: DatasetOptions) -> Iterator[None]:
    """Make `options` apply to every pipeline compiled inside this block (a user's node)."""
    token = _outer.set(options)
    try:
        yield
    finally:
        _outer.reset(token)

"""`WithOptionsIterDataset(parent, options)`: `DatasetOptions` for the whole pipeline
(Grain's `grain.experimental.WithOptionsIterDataset`).

The options apply to every transformation of the pipeline, before and after the node,
as in Grain: `iter()` merges every `WithOptionsIterDataset` of the graph first
(`pipeline_options`, the outer winning where two set a field) and compiles the pipeline
with the result. The elements are the parent's; only the filter checks change (see
`filter_checks`).
"""

from __future__ import annotations

import dataclasses
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
    """The options of every `WithOptionsIterDataset` in `dataset`'s graph, merged: inner
    ones first, each outer one over them (Grain's order)."""
    found: list[DatasetOptions] = []
    nodes, seen = [dataset], set()
    while nodes:  # outer to inner
        node = nodes.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, WithOptionsIterDataset):
            found.append(node.options)
        nodes += getattr(node, "parents", ())
    merged = DatasetOptions()
    for options in reversed(found):
        merged = options.merge(merged)
    return merged

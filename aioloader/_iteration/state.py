"""Checkpoint states: a position plus what the pipeline was made from.

A state is a few hundred bytes of JSON whatever the dataset size. It records
the sampler, the source's type and length and the kinds of operations, and a
state from a different pipeline is rejected; the worker count is not part of
it, so a state resumes under any `worker_count` or executor.
"""

from __future__ import annotations

import abc
from typing import Any

from aioloader._common.positions import Position

STATE_VERSION = 2
# Version 1 states were written before the samplers took Grain's shuffle and
# sharding: their positions still name the same records only for a sampler
# that neither shuffles nor shards, and only such states are accepted.
_OLD_VERSION = 1
_POSITION_FIELDS = ("index", "skip_elements", "skip_outputs")


def make_state(position: Position, pipeline: dict[str, Any]) -> dict[str, Any]:
    """The JSON-serialisable state for `position` in the pipeline described by `pipeline`."""
    return {
        "version": STATE_VERSION,
        "position": dict(zip(_POSITION_FIELDS, position, strict=True)),
        "pipeline": pipeline,
    }


def read_state(state: Any, pipeline: dict[str, Any]) -> Position:
    """The position in `state`, after checking it was made by this pipeline.

    Raises ValueError naming what differs (sampler, data source, operations)
    or what is malformed.
    """
    if not isinstance(state, dict) or state.get("version") not in (STATE_VERSION, _OLD_VERSION):
        raise ValueError(
            f"`state` must be a dict made by get_state() (version {STATE_VERSION}), got {state!r:.200}."
        )
    theirs = state.get("pipeline")
    if not isinstance(theirs, dict):
        raise ValueError("`state` has no 'pipeline' description; it was not made by get_state().")
    if state["version"] == _OLD_VERSION:
        _check_old_order(theirs.get("sampler"))
    for part in ("sampler", "data_source", "operations"):
        if theirs.get(part) != pipeline[part]:
            raise ValueError(
                f"`state` was made by a pipeline with another {part}: {theirs.get(part)!r}, "
                f"but this loader's {part} is {pipeline[part]!r}."
            )
    raw = state.get("position")
    if not isinstance(raw, dict):
        raise ValueError("`state` has no 'position'.")
    values = [raw.get(name) for name in _POSITION_FIELDS]
    for name, value in zip(_POSITION_FIELDS, values, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"`state['position']['{name}']` must be an int >= 0, got {value!r}.")
    return (values[0], values[1], values[2])  # type: ignore[return-value]


def _check_old_order(sampler: Any) -> None:
    """A version-1 state resumes only where its positions still name the same records."""
    if not isinstance(sampler, dict) or sampler.get("shuffle") or sampler.get("shard", [0, 1])[1] != 1:
        raise ValueError(
            "`state` was saved (version 1) before aioloader's samplers took Grain's shuffle and "
            f"sharding, by a sampler that shuffles or shards ({sampler!r}); its positions name other "
            "records now, so it cannot be resumed without repeating or skipping records."
        )


class CheckpointableIterator(abc.ABC):
    """An iterator the orbax handler saves and restores besides a DataLoader's: the
    iterators of an IterDataset, defined a layer up, derive from it.

    `get_state()` returns a JSON-serialisable dict; `set_state(state)` resumes from it.
    """

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None: ...

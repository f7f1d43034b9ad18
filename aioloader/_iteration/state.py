"""Checkpoint states: a position plus what the pipeline was made from.

A state is a few hundred bytes of JSON whatever the dataset size. It records
the sampler, the source's type and length and the kinds of operations, and a
state from a different pipeline is rejected; the worker count is not part of
it, so a state resumes under any `worker_count` or executor.

`get_state()` returns what Grain's does, bytes of a JSON document with
Grain's fields (`grain_state`), and aioloader's own part under the key
`aioloader`: `{"version": 2, "position": ..., "pipeline": ...}`, plus
`leftovers` after a Grain state of several workers (see `Leftovers`).
`set_state()` takes that, a state saved by Grain's own DataLoader, or the
dict that aioloader's `get_state()` returned before (versions 1 and 2).
"""

from __future__ import annotations

import abc
import operator
from typing import Any

from aioloader._common.positions import Position
from aioloader._iteration.grain_state import (
    GrainNames,
    grain_fields,
    is_grain_state,
    normalized,
    read_grain_state,
)
from aioloader._sources.protocols import same_source

STATE_VERSION = 2
# Version 1 states were written before the samplers took Grain's shuffle and
# sharding: their positions still name the same records only for a sampler
# that neither shuffles nor shards, and only such states are accepted.
_OLD_VERSION = 1
_POSITION_FIELDS = ("index", "skip_elements", "skip_outputs")


def make_state(
    position: Position, pipeline: dict[str, Any], leftovers: list[int] | None = None
) -> dict[str, Any]:
    """The JSON-serialisable state for `position` in the pipeline described by `pipeline`
    (with `leftovers`: the starts of a Grain state's workers, see `Leftovers`)."""
    state = {
        "version": STATE_VERSION,
        "position": dict(zip(_POSITION_FIELDS, position, strict=True)),
        "pipeline": pipeline,
    }
    if leftovers is not None:
        state["leftovers"] = leftovers
    return state


def dump_state(
    position: Position, leftovers: list[int] | None, pipeline: dict[str, Any], names: GrainNames
) -> bytes:
    """What `get_state()` returns: Grain's fields and aioloader's part, as JSON bytes (as Grain's)."""
    leftovers = normalized(position[0], leftovers)
    document = {
        **grain_fields(position[0], leftovers, names),
        "aioloader": make_state(position, pipeline, leftovers),
    }
    import json  # here, as in _document: `import aioloader` leaves json for the first state

    return json.dumps(document, separators=(",", ":")).encode()


def describe(name: str, state: bytes) -> str:
    """`str()` of an iterator, as Grain's: its name and its state, indented."""
    import json

    return f"{name}(state={json.dumps(json.loads(state), indent=4)})"


def load_state(
    state: Any, pipeline: dict[str, Any], names: GrainNames, length: int | None
) -> tuple[Position, list[int] | None]:
    """The position in any state `set_state()` takes, and the starts of the Grain workers
    whose records are still left behind it (None: none are).

    Raises ValueError for what is not a state, or a state of another pipeline.
    """
    document = _document(state)
    if is_grain_state(document):
        starts = read_grain_state(document, names, length)
        position: Position = (min(starts), 0, 0)
        return position, normalized(position[0], starts)
    ours = document.get("aioloader", document)
    position = read_state(ours, pipeline)
    return position, normalized(position[0], read_leftovers(ours, position[0]))


def _document(state: Any) -> dict[str, Any]:
    """`state` as a dict: JSON bytes (or text) as `get_state()` returns, or a dict."""
    import json

    document = state
    if isinstance(state, bytes | bytearray | str):
        try:
            document = json.loads(state)
        except (ValueError, RecursionError) as error:  # nested past the parser's depth: not ours either
            raise ValueError(f"`state` is not the JSON that get_state() returns: {error}.") from None
    if not isinstance(document, dict):
        raise ValueError(
            f"`state` must be what get_state() returns (JSON bytes holding an object), got {state!r:.200}."
        )
    return document


def read_state(state: Any, pipeline: dict[str, Any]) -> Position:
    """The position in `state`, after checking it was made by this pipeline.

    Raises ValueError naming what differs (sampler, data source, operations)
    or what is malformed.
    """
    version = state.get("version") if isinstance(state, dict) else None
    if type(version) is not int or version not in (STATE_VERSION, _OLD_VERSION):  # not True, nor 2.0
        raise ValueError(
            f"`state` must be a dict made by get_state() (version {STATE_VERSION}), got {state!r:.200}."
        )
    theirs = state.get("pipeline")
    if not isinstance(theirs, dict):
        raise ValueError("`state` has no 'pipeline' description; it was not made by get_state().")
    if state["version"] == _OLD_VERSION:
        _check_old_order(theirs.get("sampler"))
    for part in ("sampler", "data_source", "operations"):
        same = same_source if part == "data_source" else operator.eq
        if not same(theirs.get(part), pipeline[part]):
            differ = _fields_that_differ(theirs.get(part), pipeline[part])
            raise ValueError(
                f"`state` was made by a pipeline with another {part}{differ}: {theirs.get(part)!r}, "
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


def check_position(position: Position, pipeline: dict[str, Any], length: int | None) -> None:
    """Reject a position that this pipeline cannot reach, naming the field and its allowed range.

    `length` is the sampler's (None: endless). Elements of a record are
    skipped only after a flat-map splits it across outputs, and outputs of a
    batch only after a flat-map follows `Batch`; at the end, nothing is.
    Whether a record or batch gives more than the count skipped is checked
    when it is made again (`Run.drop_leading`).
    """
    index, skip_elements, skip_outputs = position
    if length is not None and index > length:
        _out_of_range("index", f"between 0 and the sampler's length {length}", index)
    operations = [str(kind) for kind in pipeline.get("operations", ())]
    batch = next((i for i, kind in enumerate(operations) if kind.startswith("batch(")), len(operations))
    ends = length is not None and index == length
    if skip_elements and (ends or "flat_map" not in operations[:batch]):
        _out_of_range("skip_elements", _zero_unless("a flat-map before any Batch", ends), skip_elements)
    if skip_outputs and (ends or "flat_map" not in operations[batch + 1 :]):
        _out_of_range("skip_outputs", _zero_unless("a Batch followed by a flat-map", ends), skip_outputs)


def _zero_unless(what: str, ends: bool) -> str:
    return "0 at the end of the sampler" if ends else f"0 in a pipeline without {what}"


def _out_of_range(field: str, allowed: str, value: int) -> None:
    raise ValueError(
        f"`state['position']['{field}']` must be {allowed}, got {value}: "
        "this state cannot come from this pipeline."
    )


def read_leftovers(state: dict[str, Any], index: int) -> list[int] | None:
    """The starts of the Grain workers a state carries (see `Leftovers`), checked against
    its position `index`; None when it has none."""
    raw = state.get("leftovers")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) < 2 or not all(_count(x) for x in raw):
        raise ValueError(f"`state['leftovers']` must be a list of two or more ints >= 0, got {raw!r:.200}.")
    if index < raw[index % len(raw)]:
        raise ValueError(
            f"`state` is at index {index}, which its leftovers {raw!r:.200} say was delivered already."
        )
    return raw


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fields_that_differ(theirs: Any, ours: Any) -> str:
    """` (its seed, shuffle differ)` for two descriptions that are dicts; else nothing."""
    if not (isinstance(theirs, dict) and isinstance(ours, dict)):
        return ""
    names = [name for name in {**theirs, **ours} if theirs.get(name) != ours.get(name)]
    if not names:
        return ""
    return f" (its {', '.join(names)} {'differ' if len(names) > 1 else 'differs'})"

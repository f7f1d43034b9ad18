"""`IterDataset.mix(datasets, weights)`: several iterators interleaved by weight, in order.

Output `k` comes from the input that Grain's selection gives for `k` (the same integer
proportions and the same rule as `MapDataset.mix`, see `mixing`), so the order equals
Grain's. The mix ends as soon as any input ends (or fails): the inputs after it are not
read further.

The state is the position `k` and each input's own state. With the inputs given as a
dict, the states are keyed by name, and restoring one into a pipeline with other weights
or other inputs (Grain allows it since 0.2.15) continues every input the state names
from where it was, and starts the new ones from their beginning: no element of an
unchanged input is repeated or skipped. The new weights select from position `k` on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from aioloader._common.failures import note
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.mixing import integer_proportions, require_weights, select_by_proportions
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, require_count, state_fields

T = TypeVar("T")


class MixedIterDataset(IterDataset[T]):
    """The inputs' elements interleaved in proportion to the weights (Grain's `IterDataset.mix`)."""

    def __init__(self, datasets: Any, weights: Any) -> None:
        self._names, inputs = _require_inputs(datasets)
        super().__init__(inputs)
        self._inputs: tuple[IterDataset[T], ...] = inputs
        values = require_weights(_weights_in_order(weights, self._names), len(inputs))
        self._proportions = (1,) * len(inputs) if weights is None else integer_proportions(values)

    def _plan(self, settings: Settings) -> Plan:
        stages = [as_stage(d._plan(settings)) for d in self._inputs]
        return MixStage(stages, self._names, self._proportions)

    def __repr__(self) -> str:
        return f"IterDataset.mix({len(self._inputs)} datasets, proportions={list(self._proportions)})"


class MixStage(Stage[Any]):
    """The mix running: output `k` from the input `select_by_proportions(k)` names."""

    def __init__(self, inputs: Sequence[Stage[Any]], names: tuple[str, ...] | None, proportions: Any) -> None:
        super().__init__(inputs)
        self._names, self._proportions = names, tuple(proportions)
        self._index = 0
        self._stopped = False

    def __next__(self) -> Any:
        if self._stopped:
            raise StopIteration
        which, _ = select_by_proportions(self._index, self._proportions)
        self._index += 1
        try:
            return next(self.parents[which])
        except BaseException as error:
            self._stopped = True  # the end of any input is the end of the mix
            if not isinstance(error, StopIteration):
                note(error, f"aioloader: raised by input {self._name(which)} of IterDataset.mix")
            raise

    def _name(self, which: int) -> str:
        return repr(self._names[which]) if self._names is not None else str(which)

    def snapshot(self) -> Any:
        return self._index, self._stopped, tuple(parent.snapshot() for parent in self.parents)

    def state_of(self, token: Any) -> dict[str, Any]:
        index, stopped, tokens = token
        states = [parent.state_of(t) for parent, t in zip(self.parents, tokens, strict=True)]
        by_input: Any = states if self._names is None else dict(zip(self._names, states, strict=True))
        return {"stage": "mix", "parents": by_input, "index": index, "stop": stopped}

    def set_state(self, state: dict[str, Any]) -> None:
        parents, index, stopped = state_fields(state, "mix", ("parents", "index", "stop"))
        for parent, parent_state in zip(self.parents, self._inputs_of(parents), strict=True):
            if parent_state is not None:  # a new input starts from its beginning
                parent.set_state(parent_state)
        self._index = require_count("index", index)
        self._stopped = bool(stopped)

    def _inputs_of(self, parents: Any) -> list[Any]:
        """The state of each input, in order (None for an input the state does not name)."""
        if self._names is None:
            if not isinstance(parents, list) or len(parents) != len(self.parents):
                raise ValueError(
                    f"`state` holds the states of {_count(parents)} mixed datasets, but this mix has "
                    f"{len(self.parents)}; give the datasets as a dict to change them."
                )
            return parents
        if not isinstance(parents, dict):
            raise ValueError(
                f"`state` holds the mixed datasets' states as {type(parents).__name__}, but this mix "
                "names its datasets (a dict): the state is not from a mix by name."
            )
        return [parents.get(name) for name in self._names]


def _count(parents: Any) -> str:
    return str(len(parents)) if isinstance(parents, (list, dict)) else repr(parents)


def _require_inputs(datasets: Any) -> tuple[tuple[str, ...] | None, tuple[IterDataset[Any], ...]]:
    """The inputs in order, and their names (sorted, as Grain flattens a dict) if named."""
    if isinstance(datasets, Mapping):
        if not all(isinstance(name, str) for name in datasets):
            raise TypeError(f"`datasets` given as a dict must be keyed by str names, got {list(datasets)!r}.")
        names = tuple(sorted(datasets))
        values: Sequence[Any] = [datasets[name] for name in names]
    elif isinstance(datasets, Sequence) and not isinstance(datasets, (str, bytes)):
        names, values = None, datasets
    else:
        raise TypeError(
            f"`datasets` must be a list or a dict of IterDatasets, got {type(datasets).__name__}."
        )
    if not values:
        raise ValueError("`datasets` must hold at least one IterDataset, got none.")
    return names, tuple(require_iter_dataset(f"datasets[{i}]", d) for i, d in enumerate(values))


def _weights_in_order(weights: Any, names: tuple[str, ...] | None) -> Any:
    """`weights` as a sequence in the inputs' order (a dict only for named inputs)."""
    if names is None or weights is None:
        if isinstance(weights, Mapping):
            raise TypeError("`weights` may be a dict only when `datasets` is a dict.")
        return weights
    if not isinstance(weights, Mapping) or set(weights) != set(names):
        raise ValueError(
            f"`weights` must be a dict with the names of `datasets` {list(names)}, got {weights!r}."
        )
    return [weights[name] for name in names]

"""Packing as IterDataset transformations: first-fit, best-fit, concat-then-split.

Grain's `FirstFitPackIterDataset`, `BestFitPackIterDataset` and
`ConcatThenSplitIterDataset`, with their signatures, over the packers of
`_operations.packing` and `_operations.concat_then_split` (Grain's rows, in Grain's
order). A packer runs in order, in the consumer's iterator, after the parallel parts
that read and tokenize.

A packer's own state holds positions in its input only (where the pack or row being
given began, and how much of it was given), never data; the stage adds the parent's
state at that position. To know it, the stage takes the parent's snapshot before
each element it reads (Grain's packers take the parent's whole state) and keeps those
of the pack being filled. Resuming restores the parent there and packs that pack again, skipping what
was given: exactly the rows that came next.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, check_setup, state_fields
from aioloader._operations.concat_then_split import BOSHandling, ConcatThenSplitPacker
from aioloader._operations.packing import BestFitPacker, FirstFitPacker, PackState


class _PackIterDataset(IterDataset[dict[str, Any]]):
    """A packer over the parent's elements (dicts of 1-D arrays)."""

    def __init__(
        self, parent: IterDataset[Any], make_stage: Callable[[Stage[Any], str], Stage[Any]], options: str
    ) -> None:
        parent = require_iter_dataset("parent", parent)
        super().__init__(parent)
        self._parent, self._make_stage = parent, make_stage
        self._setup = f"{type(self).__name__}({options})"  # what its state records (see `check_setup`)

    def _plan(self, settings: Settings) -> Plan:
        return self._make_stage(as_stage(self._parent._plan(settings)), self._setup)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._parent!r}, {self._setup[len(type(self).__name__) + 1 : -1]})"


class FirstFitPackIterDataset(_PackIterDataset):
    """Grain's first-fit packing: each element to the first of `num_packing_bins` rows
    with room; full packs are given row by row, shuffled by `seed` unless not
    `shuffle_bins` (see `FirstFitPacker` for the options)."""

    _packer_class: type[FirstFitPacker] = FirstFitPacker

    def __init__(
        self,
        parent: IterDataset[Any],
        *,
        length_struct: Mapping[str, int],
        num_packing_bins: int,
        seed: int = 0,
        shuffle_bins: bool = True,
        shuffle_bins_group_by_feature: str | None = None,
        meta_features: Sequence[str] = (),
        pack_alignment_struct: Mapping[str, int] | None = None,
        padding_struct: Mapping[str, Any] | None = None,
        max_sequences_per_bin: int | None = None,
    ) -> None:
        given: dict[str, Any] = {
            "seed": seed,
            "shuffle_bins": shuffle_bins,
            "shuffle_bins_group_by_feature": shuffle_bins_group_by_feature,
            "meta_features": meta_features,
            "pack_alignment_struct": pack_alignment_struct,
            "padding_struct": padding_struct,
            "max_sequences_per_bin": max_sequences_per_bin,
        }
        packer = self._packer_class(length_struct, num_packing_bins, **given)
        options = _setup_text(length_struct=length_struct, num_packing_bins=num_packing_bins, **given)
        super().__init__(
            parent, lambda stage, setup: PackerStage(stage, packer, "pack", PackState(), setup), options
        )


def _setup_text(**options: Any) -> str:
    """A packer's arguments as its state records them (see `check_setup`): NumPy scalars
    as Python's, mappings by sorted key, sequences as lists, for none of these changes
    the output, so none may refuse a state."""
    return ", ".join(f"{name}={_normal(value)!r}" for name, value in options.items())


def _normal(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        items = [(key, _normal(item)) for key, item in value.items()]
        with contextlib.suppress(TypeError):  # keys of several types: the order given
            items = sorted(items, key=lambda pair: pair[0])
        return dict(items)
    if isinstance(value, (list, tuple)):
        return [_normal(item) for item in value]
    return value


class BestFitPackIterDataset(FirstFitPackIterDataset):
    """Grain's best-fit packing: each element to the fullest row with room."""

    _packer_class = BestFitPacker


class ConcatThenSplitIterDataset(_PackIterDataset):
    """Grain's concat-then-split: elements laid end to end and cut at the row length (see
    `ConcatThenSplitPacker`)."""

    def __init__(
        self,
        parent: IterDataset[Any],
        *,
        length_struct: Mapping[str, int],
        meta_features: Sequence[str] = (),
        split_full_length_features: bool = True,
        bos_handling: Any = BOSHandling.DO_NOTHING,
        bos_features: Sequence[str] = (),
        bos_token_id: int | None = None,
    ) -> None:
        given: dict[str, Any] = {
            "meta_features": meta_features,
            "split_full_length_features": split_full_length_features,
            "bos_handling": bos_handling,
            "bos_features": tuple(bos_features),
            "bos_token_id": bos_token_id,
        }
        packer = ConcatThenSplitPacker(length_struct, **given)
        options = _setup_text(length_struct=length_struct, **given)
        super().__init__(
            parent,
            lambda stage, setup: PackerStage(stage, packer, "concat_then_split", packer.start_state(), setup),
            options,
        )


class _Inputs:
    """The parent's elements numbered from `start`, with the parent's snapshot before each,
    kept from the oldest position still asked for on."""

    def __init__(self, parent: Stage[Any], start: int) -> None:
        self._parent = parent
        self._tokens: collections.deque[tuple[int, Any]] = collections.deque([(start, parent.snapshot())])
        self._next = start

    def __iter__(self) -> Iterator[Any]:
        while True:
            if self._tokens[-1][0] != self._next:
                self._tokens.append((self._next, self._parent.snapshot()))
            try:
                element = next(self._parent)
            except StopIteration:
                return
            self._next += 1
            yield element

    def token_at(self, position: int) -> Any:
        """The parent's snapshot before element `position`, forgetting those before it."""
        while self._tokens[0][0] < position:
            self._tokens.popleft()
        found, token = self._tokens[0]
        assert found == position, (found, position)
        return token


class _Packer(Protocol):
    def pack(self, elements: Iterable[Any], state: Any = None) -> Iterator[tuple[dict[str, Any], Any]]: ...


class PackerStage(Stage[dict[str, Any]]):
    """A packer running over the parent. Its state is `{"stage": kind, "parent": ...}` and
    the fields of the packer's own state (`PackState` or `SplitState`), by name.

    `start` is the packer's state before its first row. It has the fields, and the
    structure, of every later state: a checkpoint's layout never changes as the run goes
    on (Grain's `assert_equal_output_after_checkpoint` and a checkpointer restoring into
    a template compare it)."""

    def __init__(self, parent: Stage[Any], packer: _Packer, kind: str, start: Any, setup: str) -> None:
        super().__init__((parent,))
        self._parent, self._packer, self._kind, self._begin = parent, packer, kind, start
        self._setup = setup
        self._fields = tuple(field.name for field in dataclasses.fields(start))
        self._rows: Iterator[tuple[dict[str, Any], Any]] | None = None
        self._inputs: _Inputs | None = None
        self._after: Any = None  # the packer's state after the last row given

    def _start(self, packer_state: Any) -> None:
        """Pack from `packer_state`, the parent standing where it says."""
        self._inputs = _Inputs(self._parent, packer_state.start)
        self._rows = self._packer.pack(iter(self._inputs), packer_state)
        self._after = packer_state

    def __next__(self) -> dict[str, Any]:
        if self._rows is None:
            self._start(self._begin)
        assert self._rows is not None
        row, self._after = next(self._rows)
        return row

    def snapshot(self) -> Any:
        if self._inputs is None:
            return self._parent.snapshot(), self._begin
        return self._inputs.token_at(self._after.start), self._after

    def state_of(self, token: Any) -> dict[str, Any]:
        parent, packer_state = token
        fields = {name: _plain(getattr(packer_state, name)) for name in self._fields}
        return {"stage": self._kind, "parent": self._parent.state_of(parent), **fields, "setup": self._setup}

    def set_state(self, state: dict[str, Any]) -> None:
        parent, *fields = state_fields(state, self._kind, ("parent", *self._fields))
        check_setup(state, self._setup)
        packer_state = _checked(type(self._begin), *fields)
        self._parent.set_state(parent)
        self._start(packer_state)


def _plain(value: Any) -> Any:
    """A packer state's field as JSON has it (a mapping of offsets as a dict)."""
    return dict(value) if isinstance(value, Mapping) else value


def _checked(make: Callable[..., Any], *fields: Any) -> Any:
    """A packer's state from a checkpoint's fields; a ValueError naming what is wrong."""
    try:
        return make(*fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"`state` holds a packer state that does not fit: {error}") from None

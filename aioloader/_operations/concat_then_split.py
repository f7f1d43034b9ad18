"""Concatenate-then-split packing: no padding but at the end, sequences cut at row edges.

Elements are laid one after another into a row of `length_struct[key]` cells per
feature; an element that does not fit whole is cut, the rest of it opening the next
row. With one feature this is plain concatenation of the whole stream cut into rows;
with several, a row is closed as soon as one feature is full and the others are
padded. Rows carry `key_segment_ids` and `key_positions` as the bin packers make them
(positions restart at 0 in the part of an element that continues on a new row).

This gives Grain's `ConcatThenSplitIterDataset` rows, in its order, including its
`split_full_length_features=False` option: an element with a feature of exactly the
row length then becomes a row of its own, emitted right after the row being filled.
One difference: where Grain cuts an element that was already cut once, and one of
its features needs no further cut, Grain repeats tokens of that feature and drops
others; here every token appears exactly once.

Meta features (`meta_features`) are never cut: they must fit their row length, are
copied whole into every row a cut element spans, and get no ids or positions.

With `bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS`, the first cell of every
segment of the `bos_features` becomes `bos_token_id` (Grain's option; Grain also writes
it where a segment is empty, into the next segment or the padding, which is not done here).

The state holds positions only: the input element the last filled row began with
(with how much of it was already used, if it was cut) and the rows delivered since.
Resuming reads from that element and skips those rows.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aioloader._common.validation import require_bool, require_int
from aioloader._operations.packing import Key, Layout, Row, fill


class BOSHandling(enum.Enum):
    """Grain's BOS options for concat-then-split (Grain's own enum is accepted too)."""

    DO_NOTHING = enum.auto()
    REPLACE_FIRST_TOKEN_WITH_BOS = enum.auto()


@dataclass(frozen=True)
class SplitState:
    """Where concat-then-split stands, as positions in the input (no data).

    `start` is the input position of the first element of the row being filled,
    `offsets` (per sequence feature) how much of that element earlier rows took, and
    `emitted` the rows delivered since that point. The packer writes a 0 for each
    feature when no row took any of it, never None, so that every state has the same
    structure; None (the default, and older checkpoints' value) means the same.
    """

    start: int = 0
    offsets: Mapping[str, int] | None = None
    emitted: int = 0

    def __post_init__(self) -> None:
        require_int("state.start", self.start, minimum=0)
        require_int("state.emitted", self.emitted, minimum=0)
        if self.offsets is not None:
            if not isinstance(self.offsets, Mapping):
                raise TypeError(f"`state.offsets` must be a dict or None, got {self.offsets!r}.")
            for key, offset in self.offsets.items():
                require_int(f"state.offsets[{key!r}]", offset, minimum=0)


@dataclass
class _Piece:
    """The cells `[start[key], stop[key])` of each sequence feature of the input element at
    `position`; meta features are always whole."""

    position: int
    features: dict[Key, np.ndarray]
    start: dict[Key, int]
    stop: dict[Key, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, start in self.start.items():
            self.stop.setdefault(key, len(self.features[key]))
            if not 0 <= start <= self.stop[key]:
                raise ValueError(
                    f"`state.offsets[{key!r}]` is {start}, outside element {self.position}'s "
                    f"{self.stop[key]} cells: the state is not from this input."
                )

    def length(self, key: Key) -> int:
        if key in self.start:
            return self.stop[key] - self.start[key]
        return len(self.features[key])

    def cells(self, key: Key) -> np.ndarray:
        if key in self.start:
            return self.features[key][self.start[key] : self.stop[key]]
        return self.features[key]

    def split(self, take: dict[Key, int]) -> tuple[_Piece, _Piece]:
        """The first `take[key]` cells of each sequence feature, and the rest."""
        middle = {key: start + take[key] for key, start in self.start.items()}
        return (
            _Piece(self.position, self.features, dict(self.start), dict(middle)),
            _Piece(self.position, self.features, middle, dict(self.stop)),
        )


class ConcatThenSplitPacker:
    """Grain's concat-then-split packing (see the module's docstring)."""

    def __init__(
        self,
        length_struct: Mapping[str, int],
        *,
        meta_features: Sequence[str] = (),
        split_full_length_features: bool = True,
        bos_handling: Any = BOSHandling.DO_NOTHING,
        bos_features: Sequence[str] = (),
        bos_token_id: int | None = None,
    ) -> None:
        self.layout = Layout.of(length_struct, meta_features)
        outside = [k for k in self.layout.meta if k not in self.layout.lengths]
        if outside:
            raise ValueError(f"`meta_features` names {outside}, which `length_struct` does not.")
        self._split_full = require_bool("split_full_length_features", split_full_length_features)
        self._bos = _bos_features(bos_handling, bos_features, bos_token_id, self.layout)
        self._bos_token = bos_token_id

    def pack(
        self, elements: Iterable[Any], state: SplitState | None = None
    ) -> Iterator[tuple[Row, SplitState]]:
        """The rows, each with the state after it; `elements` start at input position `state.start`."""
        state = state or self.start_state()
        inputs = iter(elements)
        rest, position = self._resume(inputs, state)
        skip, ready = state.emitted, collections.deque[Row]()
        while True:
            checkpoint = (
                self.start_state(position) if rest is None else SplitState(rest.position, _named(rest.start))
            )
            rest, position, more = self._fill(inputs, rest, position, ready)
            if not ready and more:
                raise AssertionError(f"no row could be filled at input position {position}")
            for emitted in range(1, len(ready) + 1):
                row = ready.popleft()
                if emitted > skip:
                    yield row, SplitState(checkpoint.start, checkpoint.offsets, emitted)
            skip = 0
            if not more:
                return

    def start_state(self, position: int = 0) -> SplitState:
        """The state before the element at `position`, none of it taken yet."""
        return SplitState(position, dict.fromkeys(self._sequence_keys(), 0))

    def _resume(self, inputs: Iterator[Any], state: SplitState) -> tuple[_Piece | None, int]:
        """The rest of the element that was cut at `state` (if any), and the next input position."""
        if state.offsets is None:
            return None, state.start
        self._check_offsets(state.offsets)
        if not any(state.offsets.values()):
            # Nothing of it was taken: read it afresh, as if none were cut (an input at its
            # end has no element there to read).
            return None, state.start
        features = self._features(_first(inputs, state.start), state.start)
        offsets: dict[Key, int] = {key: value for key, value in state.offsets.items()}  # typed as Keys
        return _Piece(state.start, features, offsets), state.start + 1

    def _fill(
        self, inputs: Iterator[Any], rest: _Piece | None, position: int, ready: collections.deque[Row]
    ) -> tuple[_Piece | None, int, bool]:
        """Fill one row, and queue it before the whole rows passed through meanwhile; return
        what is left of a cut element, the next input position and whether the input may
        hold more."""
        row: list[_Piece] = []
        used = dict.fromkeys(self.layout.lengths, 0)
        more = True
        while True:
            if rest is not None:
                rest = self._add(rest, row, used)
                if rest is not None:
                    break  # the row is full
            element = next(inputs, _END)
            if element is _END:
                more = False
                break
            rest = _Piece(
                position, self._features(element, position), dict.fromkeys(self._sequence_keys(), 0)
            )
            position += 1
            if not self._split_full and self._full_length(rest):
                ready.append(self._row([rest]))  # already a row of its own
                rest = None
        if row:
            ready.appendleft(self._row(row))
        return rest, position, more

    def _add(self, piece: _Piece, row: list[_Piece], used: dict[Key, int]) -> _Piece | None:
        """Put as much of `piece` into `row` as fits; return what is left (None if nothing)."""
        take: dict[Key, int] = {}
        for key, length in self.layout.lengths.items():
            have, room = piece.length(key), length - used[key]
            if key not in piece.start:  # a meta feature: whole or not at all
                if have > room:
                    return piece
            else:
                take[key] = min(have, room)
        whole = all(take[key] == piece.length(key) for key in take)
        if not whole and not any(take.values()):
            return piece  # nothing of it fits: it opens the next row
        head, rest = (piece, None) if whole else piece.split(take)
        row.append(head)
        for key in used:
            used[key] += head.length(key)
        return rest

    def _row(self, pieces: list[_Piece]) -> Row:
        """One packed row of `pieces`, in Grain's format."""
        row: Row = {}
        for key, length in self.layout.lengths.items():
            first = pieces[0].features[key]
            values = np.zeros((length, *first.shape[1:]), first.dtype)
            segment_ids, positions = np.zeros(length, np.int32), np.zeros(length, np.int32)
            end = 0
            for segment, piece in enumerate(pieces, 1):
                cells = piece.cells(key)
                start, end = end, end + len(cells)
                fill(values, (slice(start, end),), cells, key, piece.position)
                if key in self._bos and end > start:
                    values[start] = self._bos_token
                segment_ids[start:end] = segment
                positions[start:end] = np.arange(end - start, dtype=np.int32)
            row[_name(key)] = values
            if self.layout.is_sequence(key):
                row[f"{key}_segment_ids"], row[f"{key}_positions"] = segment_ids, positions
        return row

    def _features(self, element: Any, position: int) -> dict[Key, np.ndarray]:
        if isinstance(element, Mapping) and set(element) != set(self.layout.lengths):
            extra = sorted(map(str, set(element) - set(self.layout.lengths)))
            if extra:
                raise ValueError(
                    f"element {position} has the features {extra}, which `length_struct` does not name; "
                    "every feature needs a row length."
                )
        features = self.layout.features(element, position, split=True)
        return {key: value.reshape(1) if value.ndim == 0 else value for key, value in features.items()}

    def _full_length(self, piece: _Piece) -> bool:
        lengths = [(piece.length(key), length) for key, length in self.layout.lengths.items()]
        return all(have <= length for have, length in lengths) and any(
            have == length for have, length in lengths
        )

    def _sequence_keys(self) -> list[str]:
        return [_name(key) for key in self.layout.lengths if self.layout.is_sequence(key)]

    def _check_offsets(self, offsets: Mapping[str, int]) -> None:
        if set(offsets) != set(self._sequence_keys()):
            raise ValueError(
                f"`state.offsets` must name the sequence features {self._sequence_keys()}, "
                f"got {sorted(offsets)}: the state is not from this packer."
            )


_END = object()


def _bos_features(handling: Any, features: Any, token: Any, layout: Layout) -> frozenset[str]:
    """The features whose segments start with the BOS token (none for DO_NOTHING), checked as
    Grain checks them."""
    name = getattr(handling, "name", None)
    if name not in BOSHandling.__members__:
        raise TypeError(f"`bos_handling` must be a BOSHandling, got {handling!r}.")
    if isinstance(features, str) or not all(isinstance(k, str) for k in features):
        raise TypeError(f"`bos_features` must be a collection of feature names, got {features!r}.")
    chosen = frozenset(features)
    if name == "DO_NOTHING":
        if token is not None or chosen:
            raise ValueError(
                "`bos_handling` is DO_NOTHING, so `bos_token_id` and `bos_features` must not be set, "
                f"got bos_token_id={token!r}, bos_features={sorted(chosen)}."
            )
        return chosen
    if token is None:
        raise ValueError(f"`bos_token_id` must be set when `bos_handling` is {name}, got None.")
    require_int("bos_token_id", token)
    wrong = sorted(chosen - set(layout.lengths) | chosen & set(layout.meta))
    if wrong:
        raise ValueError(
            f"`bos_features` {wrong} must be sequence features of `length_struct`, not meta features."
        )
    return chosen


def _first(inputs: Iterator[Any], position: int) -> Any:
    element = next(inputs, _END)
    if element is _END:
        raise ValueError(f"`state` resumes inside element {position}, but the input has no element there.")
    return element


def _name(key: Key) -> str:
    """A feature's name: this packer's layout has no nested features (no paths)."""
    assert isinstance(key, str), key
    return key


def _named(values: dict[Key, int]) -> dict[str, int]:
    return {_name(key): value for key, value in values.items()}

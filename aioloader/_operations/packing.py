"""Packing variable-length sequences into rows of a fixed length: first-fit and best-fit.

An element is a dict of features; each feature named in `length_struct` is a sequence
(a 1-D array, or an array whose first axis is the sequence; a scalar counts as length
1). Packing puts several elements side by side in one row of `length_struct[key]`
cells per feature, and adds, per packed feature `key`, the two features JAX trainers
expect (Grain's output format):

- `key_segment_ids` (int32): 1 for the cells of the row's first element, 2 for the
  second, ..., 0 for padding, so attention can be masked per segment;
- `key_positions` (int32): 0, 1, 2, ... within each element, 0 in padding.

The packers work as Grain's `FirstFitPackIterDataset` / `BestFitPackIterDataset` do,
and give the same rows in the same order: elements fill a pack of `num_packing_bins`
rows, each going to the first row where it fits (first-fit) or to the fullest row
where it fits (best-fit); when one fits nowhere, the pack's rows are emitted (in an
order shuffled by `seed` unless `shuffle_bins=False`) and a new pack starts with it.

They are plain, deterministic algorithms with no engine behind them: `pack()` reads
elements from any iterator and gives each row with the `PackState` after it. The state
holds no data, only positions in the input (the caller restarts its input there), so
a pipeline resumes in the middle of a pack by packing that pack again and skipping
the rows already delivered.

Meta features (`meta_features`) are not packed as sequences: one that has a length in
`length_struct` is placed like the others but gets no segment ids or positions; one
that has none is collected, per row, into a list of the values of that row's elements.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aioloader._common.validation import require_bool, require_int

Row = dict[str, Any]


@dataclass(frozen=True)
class PackState:
    """Where packing stands, as positions in the input (no data).

    `start` is the input position where the pack being emitted began (or, between
    packs, where the next one begins), `emitted` how many of its rows were delivered,
    and `rows` how many rows were delivered in all (it seeds the order of the rows).
    """

    start: int = 0
    emitted: int = 0
    rows: int = 0

    def __post_init__(self) -> None:
        for name in ("start", "emitted", "rows"):
            require_int(f"state.{name}", getattr(self, name), minimum=0)
        if self.emitted > self.rows:
            raise ValueError(
                f"`state` has emitted={self.emitted} rows of a pack but rows={self.rows} in all."
            )


# A feature of a packed row: its name, or for a leaf of a nested meta feature the path to it.
Key = str | tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """The checked shape of a packed row: sequence features, their lengths, and meta features.

    A meta feature may be nested (a dict of features, as Grain's first-fit and best-fit
    packers take it): each of its leaves is placed as a feature of its own, keyed by its
    path, and the row holds the same nesting."""

    lengths: dict[Key, int]
    meta: tuple[str, ...]

    @classmethod
    def of(cls, length_struct: Any, meta_features: Any, *, nested_meta: bool = False) -> Layout:
        if not isinstance(length_struct, Mapping) or not length_struct:
            raise TypeError(
                "`length_struct` must be a non-empty dict of feature name to row length, "
                f"got {length_struct!r}."
            )
        if isinstance(meta_features, str) or not all(isinstance(k, str) for k in meta_features):
            raise TypeError(f"`meta_features` must be a sequence of feature names, got {meta_features!r}.")
        meta = tuple(meta_features)
        lengths: dict[Key, int] = {}
        for key, length in length_struct.items():
            if not isinstance(key, str):
                raise TypeError(f"`length_struct` keys must be feature names (str), got {key!r}.")
            if nested_meta and isinstance(length, Mapping):
                if key not in meta:
                    raise ValueError(
                        f"`length_struct[{key!r}]` is nested, and only a meta feature may be: perhaps "
                        "it should be named in `meta_features` (it then gets no segment ids or positions)."
                    )
                lengths.update(_leaves((key,), length))
            else:
                lengths[key] = require_int(f"length_struct[{key!r}]", length, minimum=1)
        return cls(lengths, meta)

    def is_sequence(self, key: Key) -> bool:
        """True for the features that get segment ids and positions."""
        return isinstance(key, str) and key not in self.meta

    def loose_meta(self) -> list[str]:
        """The meta features without a row length: collected as lists."""
        placed = {key if isinstance(key, str) else key[0] for key in self.lengths}
        return [k for k in self.meta if k not in placed]

    def features(self, element: Any, position: int, *, split: bool = False) -> dict[Key, np.ndarray]:
        """The features of `element` that `length_struct` names, as arrays, checked against
        their row lengths (only the meta features, when longer sequences are `split`)."""
        if not isinstance(element, Mapping):
            raise TypeError(f"element {position} must be a dict of features, got {type(element).__name__}.")
        missing = [k for k in self.lengths if _at(element, k) is _MISSING]
        if missing:
            raise ValueError(f"element {position} lacks the features {missing} that `length_struct` names.")
        features = {key: np.asarray(_at(element, key)) for key in self.lengths}
        for key, value in features.items():
            if sequence_length(value) > self.lengths[key] and not (split and self.is_sequence(key)):
                raise ValueError(
                    f"element {position}: feature {key!r} has length {sequence_length(value)}, more than its "
                    f"row length {self.lengths[key]} in `length_struct`; truncate it first."
                )
        return features


_MISSING = object()


def _leaves(path: tuple[str, ...], lengths: Mapping[Any, Any]) -> dict[Key, int]:
    """The row length of each leaf of a nested meta feature, by its path."""
    leaves: dict[Key, int] = {}
    for key, length in lengths.items():
        where = "".join(f"[{part!r}]" for part in path)
        if not isinstance(key, str):
            raise TypeError(f"`length_struct{where}` keys must be feature names (str), got {key!r}.")
        if isinstance(length, Mapping):
            leaves.update(_leaves((*path, key), length))
        else:
            leaves[(*path, key)] = require_int(f"length_struct{where}[{key!r}]", length, minimum=1)
    return leaves


def _at(element: Mapping[str, Any], key: Key) -> Any:
    """The feature `key` of `element` (walking a path into nested dicts); `_MISSING` if absent."""
    value: Any = element
    for part in (key,) if isinstance(key, str) else key:
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _put(row: Row, key: Key, value: Any) -> None:
    """`row[key] = value`, making the nested dicts of a path."""
    if isinstance(key, str):
        row[key] = value
        return
    for part in key[:-1]:
        row = row.setdefault(part, {})
    row[key[-1]] = value


def sequence_length(value: np.ndarray) -> int:
    """Cells a feature takes in a row: its first axis, or 1 for a scalar."""
    return 1 if value.ndim == 0 else len(value)


def fill(buffer: np.ndarray, at: tuple[Any, ...], value: np.ndarray, key: Key, position: int) -> None:
    """`buffer[at] = value`, refusing a value whose shape or dtype would be changed on the way."""
    if value.shape[1:] != buffer.shape[len(at) :] and value.ndim:
        raise ValueError(
            f"element {position}: feature {key!r} has cells of shape {value.shape[1:]}, "
            f"but the row holds cells of shape {buffer.shape[len(at) :]} (set by the first element)."
        )
    lossy = value.dtype != buffer.dtype and not np.can_cast(value.dtype, buffer.dtype, "safe")
    if lossy and not np.array_equal(value.astype(buffer.dtype), value):
        raise ValueError(
            f"element {position}: feature {key!r} of dtype {value.dtype} does not fit the row's "
            f"dtype {buffer.dtype} (set by the first element) without changing its values."
        )
    buffer[at] = value


class _Pack:
    """`bins` rows being filled; every packed feature has its cells, ids and positions."""

    def __init__(self, layout: Layout, options: _BinOptions, first: dict[Key, np.ndarray]) -> None:
        self.layout, self.options = layout, options
        bins = options.bins
        self.values = {
            key: np.full((bins, length, *first[key].shape[1:]), options.padding.get(key, 0), first[key].dtype)
            for key, length in layout.lengths.items()
        }
        self.segment_ids = {key: np.zeros((bins, length), np.int32) for key, length in layout.lengths.items()}
        self.positions = {key: np.zeros((bins, length), np.int32) for key, length in layout.lengths.items()}
        self.used = np.zeros((len(layout.lengths), bins), np.int64)  # next free cell, per feature and row
        self.capacity = np.array(list(layout.lengths.values()), np.int64)[:, None]
        self.count = np.zeros(bins, np.int32)  # elements per row
        self.loose: dict[str, list[list[Any]]] = {k: [[] for _ in range(bins)] for k in layout.loose_meta()}

    def fitting_rows(self, lengths: np.ndarray) -> np.ndarray:
        """Which rows have room for an element of `lengths` (per feature)."""
        fits = np.all(self.used + lengths[:, None] <= self.capacity, axis=0)
        if self.options.max_per_row is not None:
            fits &= self.count < self.options.max_per_row
        result: np.ndarray = fits
        return result

    def add(
        self, row: int, features: dict[Key, np.ndarray], element: Mapping[str, Any], position: int
    ) -> None:
        """Put the element in `row`, after what the row holds."""
        segment = self.count[row] + 1
        for f, (key, value) in enumerate(features.items()):
            start = int(self.used[f, row])
            end = start + sequence_length(value)
            fill(self.values[key], (row, slice(start, end)), value, key, position)
            self.segment_ids[key][row, start:end] = segment
            self.positions[key][row, start:end] = np.arange(end - start, dtype=np.int32)
            align = self.options.alignment.get(key, 1)
            self.used[f, row] = -(-end // align) * align
        self.count[row] += 1
        for key, rows in self.loose.items():
            if key in element:
                rows[row].append(element[key])

    def rows(self) -> list[Row]:
        """The rows that hold something, as dicts in Grain's format (keys sorted at every
        level, as Grain's tree functions give them)."""
        filled = int(np.count_nonzero(self.count))
        rows: list[Row] = []
        for r in range(filled):
            row: Row = {}
            for key, values in self.values.items():
                _put(row, key, values[r])
            row.update((key, lists[r]) for key, lists in self.loose.items())
            for key in self.values:
                if self.layout.is_sequence(key):
                    row[f"{key}_segment_ids"] = self.segment_ids[key][r]
                    row[f"{key}_positions"] = self.positions[key][r]
            rows.append(_sorted(row))
        return rows


def _sorted(row: Row) -> Row:
    return {key: _sorted(value) if isinstance(value, dict) else value for key, value in sorted(row.items())}


@dataclass(frozen=True)
class _BinOptions:
    bins: int
    seed: int
    shuffle: bool
    padding: dict[Key, Any]
    alignment: dict[Key, int]
    max_per_row: int | None
    group_by: str | None = None


class FirstFitPacker:
    """Grain's first-fit packing: each element goes to the first row of the pack with room.

    `num_packing_bins` rows fill at once (more rows, less padding); `padding_struct`
    gives per feature the value of empty cells (0 by default); `pack_alignment_struct`
    rounds where the next element may start up to a multiple; `max_sequences_per_bin`
    caps the elements per row. With `shuffle_bins_group_by_feature`, a pack's rows come
    in the order of the average of the distinct non-zero values of that feature of the
    row (a row's feature, or its `_segment_ids` / `_positions`), the shuffled order
    breaking ties, as in Grain.
    """

    def __init__(
        self,
        length_struct: Mapping[str, int],
        num_packing_bins: int,
        *,
        seed: int = 0,
        shuffle_bins: bool = True,
        meta_features: Sequence[str] = (),
        padding_struct: Mapping[str, Any] | None = None,
        pack_alignment_struct: Mapping[str, int] | None = None,
        max_sequences_per_bin: int | None = None,
        shuffle_bins_group_by_feature: str | None = None,
    ) -> None:
        self.layout = Layout.of(length_struct, meta_features, nested_meta=True)
        self.options = _BinOptions(
            bins=require_int("num_packing_bins", num_packing_bins, minimum=1),
            seed=require_int("seed", seed, minimum=0),
            shuffle=require_bool("shuffle_bins", shuffle_bins),
            padding=_per_feature("padding_struct", padding_struct, self.layout),
            alignment={
                k: require_int(f"pack_alignment_struct[{k!r}]", v, minimum=1)
                for k, v in _per_feature("pack_alignment_struct", pack_alignment_struct, self.layout).items()
            },
            max_per_row=_max_per_row(max_sequences_per_bin),
            group_by=_row_feature(shuffle_bins_group_by_feature, self.layout),
        )

    def choose(self, pack: _Pack, fits: np.ndarray) -> int:
        """The row for an element, among the rows where it fits (at least one)."""
        return int(np.argmax(fits))

    def pack(
        self, elements: Iterable[Any], state: PackState | None = None
    ) -> Iterator[tuple[Row, PackState]]:
        """The packed rows, each with the state after it.

        `elements` must start at input position `state.start` (0 without a state):
        resuming packs that pack again and skips the `state.emitted` rows delivered.
        """
        state = state or PackState()
        position, skip, rows_before = state.start, state.emitted, state.rows - state.emitted
        pack, start = None, position
        for element in elements:
            features = self.layout.features(element, position)
            if pack is not None and not self._try_add(pack, features, element, position):
                yield from self._emit(pack, start, position, rows_before, skip)
                rows_before, skip, pack = rows_before + int(np.count_nonzero(pack.count)), 0, None
            if pack is None:
                pack, start = _Pack(self.layout, self.options, features), position
                if not self._try_add(pack, features, element, position):
                    raise AssertionError(f"element {position} does not fit an empty pack")
            position += 1
        if pack is not None:
            yield from self._emit(pack, start, position, rows_before, skip)

    def _try_add(self, pack: _Pack, features: dict[Key, np.ndarray], element: Any, position: int) -> bool:
        lengths = np.array([sequence_length(v) for v in features.values()], np.int64)
        fits = pack.fitting_rows(lengths)
        if not fits.any():
            return False
        pack.add(self.choose(pack, fits), features, element, position)
        return True

    def _emit(
        self, pack: _Pack, start: int, end: int, rows_before: int, skip: int
    ) -> Iterator[tuple[Row, PackState]]:
        """The rows of a finished pack (from input `start` up to `end`), past the first `skip`."""
        rows = pack.rows()
        order: Sequence[int] = range(len(rows))
        if self.options.shuffle:  # Grain's order: seeded by the rows delivered before the pack
            order = np.random.default_rng(self.options.seed + rows_before).permuted(order).tolist()
            if self.options.group_by is not None:
                order = _grouped(rows, order, self.options.group_by)
        for j in range(skip, len(rows)):
            last = j + 1 == len(rows)
            after = (
                PackState(end, 0, rows_before + j + 1)
                if last
                else PackState(start, j + 1, rows_before + j + 1)
            )
            yield rows[order[j]], after


class BestFitPacker(FirstFitPacker):
    """Grain's best-fit packing: each element goes to the fullest row of the pack with room
    (the most cells used, over all features; the first such row on a tie)."""

    def choose(self, pack: _Pack, fits: np.ndarray) -> int:
        fullness = pack.used.sum(axis=0)
        return int(np.argmax(np.where(fits, fullness, -1)))


def _row_feature(feature: str | None, layout: Layout) -> str | None:
    """`shuffle_bins_group_by_feature`, checked to name a feature of the packed rows."""
    if feature is None:
        return None
    sequences = [k for k in layout.lengths if layout.is_sequence(k)]
    names = [*(k for k in layout.lengths if isinstance(k, str)), *layout.loose_meta()]
    names += [f"{k}_{suffix}" for k in sequences for suffix in ("segment_ids", "positions")]
    if feature not in names:
        raise ValueError(
            f"`shuffle_bins_group_by_feature` must name a feature of the packed rows {names}, "
            f"got {feature!r}."
        )
    return feature


def _grouped(rows: list[Row], shuffled: Sequence[int], feature: str) -> list[int]:
    """Grain's order with `shuffle_bins_group_by_feature`: by each row's average of the
    distinct non-zero values of `feature` (0 for none), then by the shuffled order."""

    def average(row: Row) -> float:
        values = np.unique(np.asarray(row[feature]))
        count = np.count_nonzero(values)
        return float(values.sum() / count) if count else 0.0

    averages = [average(row) for row in rows]
    return sorted(range(len(rows)), key=lambda i: (averages[i], shuffled[i], i))


def _per_feature(name: str, values: Mapping[str, Any] | None, layout: Layout) -> dict[Key, Any]:
    """A per-feature option: a dict over (some of) the features `length_struct` names
    (nested as it is for a nested meta feature)."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise TypeError(f"`{name}` must be a dict of feature name to value or None, got {values!r}.")
    flat = _flat(values)
    unknown = [k for k in flat if k not in layout.lengths]
    if unknown:
        raise ValueError(f"`{name}` names {unknown}, which `length_struct` does not.")
    return {k: v for k, v in flat.items() if v is not None}


def _flat(values: Mapping[Any, Any], path: tuple[str, ...] = ()) -> dict[Key, Any]:
    """`values` with nested dicts flattened into paths (a top-level name stays a str)."""
    flat: dict[Key, Any] = {}
    for key, value in values.items():
        here: tuple[Any, ...] = (*path, key)
        if isinstance(value, Mapping):
            flat.update(_flat(value, here))
        else:
            flat[here[0] if len(here) == 1 else here] = value
    return flat


def _max_per_row(value: Any) -> int | None:
    """`max_sequences_per_bin` checked; below 1, in Grain's words (which its tests match)."""
    if value is None:
        return None
    count = require_int("max_sequences_per_bin", value)
    if count < 1:
        raise ValueError(
            f"If specified, `max_sequences_per_bin` must be a positive integer, but got {count}."
        )
    return count

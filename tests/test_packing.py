"""Packing sequences into rows: first-fit, best-fit, concat-then-split.

On every build: no token lost, repeated or moved, segment ids and positions as trainers
read them, the same rows after resuming at every row, and bad arguments refused by name.
Where Grain 0.2.18 is installed (3.11), the rows equal its packers' rows, in order.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from aioloader._operations.concat_then_split import ConcatThenSplitPacker, SplitState
from aioloader._operations.packing import BestFitPacker, FirstFitPacker, PackState

LENGTHS = {"inputs": 16, "targets": 12}


def token_elements(count: int, seed: int = 0, longest: int = 16, ids: bool = True) -> list[dict[str, Any]]:
    """Elements with two features of tokens >= 1 (0 is padding), and an `id` if `ids`."""
    rng = np.random.default_rng(seed)
    elements: list[dict[str, Any]] = [
        {
            "inputs": rng.integers(1, 30_000, rng.integers(1, longest + 1)).astype(np.int32),
            "targets": rng.integers(1, 30_000, rng.integers(0, 13)).astype(np.int32),
        }
        for _ in range(count)
    ]
    if ids:
        for i, element in enumerate(elements):
            element["id"] = i
    return elements


def segments(row: dict[str, Any], key: str, count: int | None = None) -> list[np.ndarray]:
    """The `count` pieces (as many as the ids show by default) of feature `key` in a row, in
    segment order, checking ids and positions."""
    ids, positions, values = row[f"{key}_segment_ids"], row[f"{key}_positions"], row[key]
    assert ids.dtype == positions.dtype == np.int32
    used = ids > 0
    assert not used[np.argmin(used) :].any() or used.all(), "padding only at the end"
    assert (values[~used] == 0).all()
    assert (positions[~used] == 0).all()
    pieces = []
    for segment in range(1, (int(ids.max(initial=0)) if count is None else count) + 1):
        at = np.flatnonzero(ids == segment)
        if len(at):
            assert (np.diff(at) == 1).all(), "a segment is contiguous"
            np.testing.assert_array_equal(positions[at], np.arange(len(at)))
        pieces.append(values[at])
    return pieces


BIN_PACKERS = [FirstFitPacker, BestFitPacker]


@pytest.mark.parametrize("packer", BIN_PACKERS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("bins", [1, 3, 8])
def test_bin_packing_places_every_element_whole_exactly_once(packer: type[FirstFitPacker], bins: int) -> None:
    source = token_elements(200)
    rows = [row for row, _ in packer(LENGTHS, bins, meta_features=["id"]).pack(source)]
    seen: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for row in rows:
        assert row["inputs"].shape == (16,)
        assert row["targets"].shape == (12,)
        ids = row["id"]
        inputs, targets = segments(row, "inputs", len(ids)), segments(row, "targets", len(ids))
        assert len(inputs) == len(targets) == len(ids) >= 1
        for element_id, a, b in zip(ids, inputs, targets, strict=True):
            assert element_id not in seen
            seen[element_id] = (a, b)
    assert sorted(seen) == list(range(200))
    for element in source:
        a, b = seen[element["id"]]
        np.testing.assert_array_equal(a, element["inputs"])
        np.testing.assert_array_equal(b, element["targets"])


def test_best_fit_puts_an_element_in_the_fullest_row_where_first_fit_takes_the_first() -> None:
    source = [{"t": np.full(n, n)} for n in (3, 8, 2)]
    first = [segments(r, "t") for r, _ in FirstFitPacker({"t": 10}, 2, shuffle_bins=False).pack(source)]
    best = [segments(r, "t") for r, _ in BestFitPacker({"t": 10}, 2, shuffle_bins=False).pack(source)]
    assert [[len(s) for s in row] for row in first] == [[3, 2], [8]]
    assert [[len(s) for s in row] for row in best] == [[3], [8, 2]]


def test_shuffle_bins_only_reorders_the_rows_of_each_pack() -> None:
    source = token_elements(100)
    plain = [r for r, _ in FirstFitPacker(LENGTHS, 4, shuffle_bins=False).pack(source)]
    shuffled = [r for r, _ in FirstFitPacker(LENGTHS, 4, seed=1).pack(source)]
    assert len(plain) == len(shuffled)
    key = [tuple(r["inputs"].tolist()) for r in plain]
    assert sorted(key) == sorted(tuple(r["inputs"].tolist()) for r in shuffled)
    assert key != [tuple(r["inputs"].tolist()) for r in shuffled]


def test_options_pad_align_and_cap_rows() -> None:
    source = [{"t": np.arange(1, n + 1)} for n in (3, 2, 4, 1)]
    packer = FirstFitPacker(
        {"t": 12}, 1, padding_struct={"t": -1}, pack_alignment_struct={"t": 4}, max_sequences_per_bin=2
    )
    rows = [r for r, _ in packer.pack(source)]
    assert rows[0]["t"].tolist() == [1, 2, 3, -1, 1, 2, -1, -1, -1, -1, -1, -1]
    assert rows[0]["t_segment_ids"].tolist() == [1, 1, 1, 0, 2, 2, 0, 0, 0, 0, 0, 0]
    assert rows[1]["t"].tolist()[:5] == [1, 2, 3, 4, 1]


@pytest.mark.parametrize(
    "make",
    [
        lambda: FirstFitPacker(LENGTHS, 3, meta_features=["id"]),
        lambda: BestFitPacker(LENGTHS, 5, seed=9, max_sequences_per_bin=3),
        lambda: FirstFitPacker(LENGTHS, 1, shuffle_bins=False),
    ],
    ids=["first-fit", "best-fit", "one-bin"],
)
def test_bin_packing_resumes_after_every_row(make: Callable[[], FirstFitPacker]) -> None:
    assert_resumes_after_every_row(make, token_elements(60))


def assert_resumes_after_every_row(make: Callable[[], Any], source: list[Any]) -> None:
    """A packer made afresh and given the state after row k gives rows k+1... and their states."""
    full = list(make().pack(source))
    for k, (_, state) in enumerate(full):
        rest = list(make().pack(iter(source[state.start :]), state))
        assert len(rest) == len(full) - k - 1
        for (row, after), (expected, expected_after) in zip(rest, full[k + 1 :], strict=True):
            assert after == expected_after
            for key in expected:
                np.testing.assert_array_equal(np.asarray(row[key], object), np.asarray(expected[key], object))


def test_split_rows_hold_every_token_once_in_order() -> None:
    source = token_elements(120, longest=40, ids=False)
    for key, length in (("inputs", 7), ("targets", 5)):
        rows = [r for r, _ in ConcatThenSplitPacker({"inputs": 7, "targets": 5}).pack(source)]
        cells = [np.concatenate(segments(r, key) or [np.zeros(0, np.int32)]) for r in rows]
        np.testing.assert_array_equal(np.concatenate(cells), np.concatenate([e[key] for e in source]))
        assert all(len(r[key]) == length for r in rows)


def test_an_element_cut_twice_keeps_every_token_once() -> None:
    # Grain 0.2.18 repeats tokens 102 and 103 of `b` here, and drops 104 and 105 from the second row.
    rows = [
        r
        for r, _ in ConcatThenSplitPacker({"a": 4, "b": 4}).pack(
            [{"a": np.arange(10), "b": np.arange(100, 106)}]
        )
    ]
    assert [r["a"].tolist() for r in rows] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 0]]
    assert [r["b"].tolist() for r in rows] == [[100, 101, 102, 103], [104, 105, 0, 0], [0, 0, 0, 0]]


def test_full_length_elements_pass_through_when_not_split() -> None:
    source = [{"t": np.full(n, n)} for n in (2, 4, 1, 4, 3)]
    rows = [
        r["t"].tolist()
        for r, _ in ConcatThenSplitPacker({"t": 4}, split_full_length_features=False).pack(source)
    ]
    assert rows == [[2, 2, 1, 3], [4, 4, 4, 4], [4, 4, 4, 4], [3, 3, 0, 0]]


def test_meta_features_are_copied_whole_into_every_row_of_a_cut_element() -> None:
    source = [{"t": np.arange(1, 10), "lang": np.array([7])}]
    rows = [r for r, _ in ConcatThenSplitPacker({"t": 4, "lang": 2}, meta_features=["lang"]).pack(source)]
    assert [r["lang"].tolist() for r in rows] == [[7, 0], [7, 0], [7, 0]]
    assert "lang_segment_ids" not in rows[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConcatThenSplitPacker({"inputs": 7, "targets": 5}),
        lambda: ConcatThenSplitPacker({"inputs": 16, "targets": 12}, split_full_length_features=False),
        lambda: ConcatThenSplitPacker({"inputs": 12, "targets": 9, "id": 1}, meta_features=["id"]),
    ],
    ids=["two-features", "pass-through", "meta"],
)
def test_split_packing_resumes_after_every_row(make: Callable[[], ConcatThenSplitPacker]) -> None:
    assert_resumes_after_every_row(make, token_elements(30, longest=30, ids="id" in make().layout.lengths))


def test_states_from_elsewhere_are_refused() -> None:
    packer = ConcatThenSplitPacker({"t": 4})
    source = [{"t": np.arange(10)}]
    with pytest.raises(ValueError, match=r"`state.offsets\['t'\]` is 11, outside element 0's 10 cells"):
        list(packer.pack(source, SplitState(0, {"t": 11}, 0)))
    with pytest.raises(
        ValueError, match=r"`state.offsets` must name the sequence features \['t'\], got \['x'\]"
    ):
        list(packer.pack(source, SplitState(0, {"x": 1}, 0)))
    with pytest.raises(ValueError, match=r"`state` resumes inside element 3, but the input has no element"):
        list(packer.pack([], SplitState(3, {"t": 1}, 0)))
    with pytest.raises(ValueError, match=r"`state.emitted` must be greater than or equal to 0, got -1"):
        SplitState(0, None, -1)
    with pytest.raises(ValueError, match=r"`state` has emitted=3 rows of a pack but rows=2 in all"):
        PackState(0, 3, 2)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: FirstFitPacker([16], 2), TypeError, r"`length_struct` must be a non-empty dict"),
        (lambda: FirstFitPacker({}, 2), TypeError, r"`length_struct` must be a non-empty dict"),
        (
            lambda: FirstFitPacker({"t": 0}, 2),
            ValueError,
            r"`length_struct\['t'\]` must be greater than or equal to 1",
        ),
        (
            lambda: FirstFitPacker({1: 4}, 2),
            TypeError,
            r"`length_struct` keys must be feature names \(str\), got 1",
        ),
        (
            lambda: FirstFitPacker({"t": 4}, 0),
            ValueError,
            r"`num_packing_bins` must be greater than or equal to 1",
        ),
        (
            lambda: FirstFitPacker({"t": 4}, 2, seed=-1),
            ValueError,
            r"`seed` must be greater than or equal to 0",
        ),
        (lambda: FirstFitPacker({"t": 4}, 2, shuffle_bins=1), TypeError, r"`shuffle_bins` must be a bool"),
        (
            lambda: FirstFitPacker({"t": 4}, 2, meta_features="id"),
            TypeError,
            r"`meta_features` must be a sequence",
        ),
        (
            lambda: FirstFitPacker({"t": 4}, 2, padding_struct={"x": 1}),
            ValueError,
            r"`padding_struct` names \['x'\]",
        ),
        (
            lambda: BestFitPacker({"t": 4}, 2, pack_alignment_struct={"t": 0}),
            ValueError,
            r"`pack_alignment_struct\['t'\]` must be greater than or equal to 1",
        ),
        (
            lambda: FirstFitPacker({"t": 4}, 2, max_sequences_per_bin=0),
            ValueError,
            r"^If specified, `max_sequences_per_bin` must be a positive integer, but got 0\.$",
        ),
        (
            lambda: ConcatThenSplitPacker({"t": 4}, meta_features=["m"]),
            ValueError,
            r"`meta_features` names \['m'\], which `length_struct` does not",
        ),
        (
            lambda: ConcatThenSplitPacker({"t": 4}, split_full_length_features="no"),
            TypeError,
            r"`split_full_length_features` must be a bool",
        ),
    ],
    ids=[
        "list",
        "empty",
        "zero-length",
        "int-key",
        "no-bins",
        "seed",
        "flag",
        "meta-str",
        "padding-key",
        "alignment",
        "max-per-bin",
        "cts-meta",
        "cts-flag",
    ],
)
def test_bad_arguments_are_refused_by_name(make: Callable[[], Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def bin_rows(elements: list[Any]) -> Iterator[Any]:
    return (row for row, _ in FirstFitPacker({"t": 4}, 2).pack(elements))


def split_rows(elements: list[Any]) -> Iterator[Any]:
    return (row for row, _ in ConcatThenSplitPacker({"t": 4}).pack(elements))


@pytest.mark.parametrize(
    ("rows", "elements", "error", "match"),
    [
        (bin_rows, [[1, 2]], TypeError, r"element 0 must be a dict of features, got list"),
        (bin_rows, [{"t": [1]}, {"u": [2]}], ValueError, r"element 1 lacks the features \['t'\]"),
        (
            bin_rows,
            [{"t": np.arange(5)}],
            ValueError,
            r"element 0: feature 't' has length 5, more than its row length 4",
        ),
        (
            bin_rows,
            [{"t": np.arange(2)}, {"t": np.array([0.5])}],
            ValueError,
            r"element 1: feature 't' of dtype float64 does not fit the row's dtype int64",
        ),
        (
            bin_rows,
            [{"t": np.zeros((2, 3))}, {"t": np.zeros((1, 2))}],
            ValueError,
            r"element 1: feature 't' has cells of shape \(2,\), but the row holds cells of shape \(3,\)",
        ),
        (split_rows, [{"t": [1], "extra": 1}], ValueError, r"element 0 has the features \['extra'\]"),
    ],
    ids=["not-a-dict", "missing", "too-long", "lossy-dtype", "cell-shape", "extra-feature"],
)
def test_bad_elements_are_refused_with_their_position(
    rows: Callable[[list[Any]], Iterator[Any]], elements: list[Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        list(rows(elements))


def test_a_lossless_dtype_change_is_accepted() -> None:
    rows = list(bin_rows([{"t": np.array([1, 2], np.int16)}, {"t": np.array([3.0, 4.0])}]))
    assert rows[0]["t"].dtype == np.int16
    assert rows[0]["t"].tolist() == [1, 2, 3, 4]


# Grain's packers (3.11).


def grain_experimental() -> Any:
    return pytest.importorskip(
        "grain.experimental", reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only"
    )


def grain_rows(make: Callable[[Any], Any], source: list[Any]) -> list[dict[str, Any]]:
    import grain

    return list(make(grain.MapDataset.source(source).to_iter_dataset()))


def assert_rows_equal(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert len(mine) == len(theirs)
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        assert list(a) == list(b), i  # the keys in Grain's order too (sorted: its tree functions')
        for key in b:
            if isinstance(a[key], list):
                assert a[key] == list(b[key]), (i, key)
            else:
                assert a[key].dtype == b[key].dtype, (i, key)
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"row {i}, {key}")


BIN_OPTIONS = [
    {},
    {"shuffle_bins": False},
    {"seed": 5, "meta_features": ["id"]},
    {"max_sequences_per_bin": 2},
    {"padding_struct": {"inputs": -1, "targets": 7}},
    {"pack_alignment_struct": {"inputs": 4, "targets": 2}},
]


@pytest.mark.parametrize("options", BIN_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("best", [False, True], ids=["first-fit", "best-fit"])
def test_bin_packing_equals_grains(best: bool, options: dict[str, Any]) -> None:
    experimental = grain_experimental()
    grain_class = experimental.BestFitPackIterDataset if best else experimental.FirstFitPackIterDataset
    source = token_elements(150, seed=3)
    theirs = grain_rows(
        lambda ds: grain_class(ds, length_struct=LENGTHS, num_packing_bins=4, **options), source
    )
    packer = (BestFitPacker if best else FirstFitPacker)(LENGTHS, 4, **options)
    assert_rows_equal([row for row, _ in packer.pack(source)], theirs)


SPLIT_CASES: dict[str, tuple[dict[str, int], dict[str, Any], int]] = {
    "one-feature": ({"inputs": 8}, {}, 40),
    "one-feature-pass-through": ({"inputs": 8}, {"split_full_length_features": False}, 12),
    "two-features-cut-once": ({"inputs": 40, "targets": 30}, {}, 40),
    "meta": ({"inputs": 10, "id": 1}, {"meta_features": ["id"]}, 16),
}


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_split_packing_equals_grains(case: str) -> None:
    experimental = grain_experimental()
    lengths, options, longest = SPLIT_CASES[case]
    source = [{k: np.atleast_1d(e[k]) for k in lengths} for e in token_elements(150, seed=4, longest=longest)]
    theirs = grain_rows(
        lambda ds: experimental.ConcatThenSplitIterDataset(ds, length_struct=lengths, **options), source
    )
    assert_rows_equal([row for row, _ in ConcatThenSplitPacker(lengths, **options).pack(source)], theirs)


def test_packer_states_keep_one_structure_for_grains_checkpoint_check() -> None:
    """Every state of a packer has the same structure, the first too (a 0 offset per feature
    when no element is cut, not None): Grain's public `assert_equal_output_after_checkpoint`
    compares them, then resumes from each; concat-then-split's offsets used to appear
    only once an element was cut."""
    source = [{"t": np.arange(1, n + 1), "id": np.array([n])} for n in (3, 8, 5, 2, 9, 1, 4)]
    packer = ConcatThenSplitPacker({"t": 4, "id": 1}, meta_features=["id"])
    assert packer.start_state() == SplitState(0, {"t": 0}, 0)
    assert all(sorted(state.offsets or {}) == ["t"] for _, state in packer.pack(source))
    experimental = grain_experimental()
    import aioloader

    makers: list[Callable[[Any], Any]] = [
        lambda ds: aioloader.ConcatThenSplitIterDataset(
            ds, length_struct={"t": 4, "id": 1}, meta_features=["id"]
        ),
        lambda ds: aioloader.ConcatThenSplitIterDataset(
            ds, length_struct={"t": 4, "id": 1}, meta_features=["id"], split_full_length_features=False
        ),
        lambda ds: aioloader.FirstFitPackIterDataset(ds, length_struct={"t": 9, "id": 3}, num_packing_bins=2),
    ]
    for make in makers:
        experimental.assert_equal_output_after_checkpoint(
            make(aioloader.MapDataset.source(source).to_iter_dataset())
        )


def test_the_packing_benchmark_runs_and_agrees_with_grain(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.packing_bench`, small: a row per packer and loader (Grain's where it
    installs, after checking its rows equal ours), padding between 0 and 1."""
    from benchmarks import packing_bench

    packing_bench.main(["--records", "150", "--length", "64", "--bins", "4", "--repeats", "1"])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if "| " in line]
    loaders = {"aioloader", "grain"} if importlib.util.find_spec("grain") else {"aioloader"}
    assert {(r[0].strip(), r[1].strip()) for r in rows[2:]} == {
        (p, name) for p in packing_bench.PACKERS for name in loaders
    }
    assert all(0.0 <= float(r[3].strip(" %")) < 100.0 for r in rows[2:])


def test_only_a_meta_feature_may_be_nested_and_its_leaves_are_checked() -> None:
    with pytest.raises(ValueError, match=r"`length_struct\['m'\]` is nested, and only a meta feature may be"):
        FirstFitPacker({"t": 4, "m": {"x": 2}}, 2)
    with pytest.raises(ValueError, match=r"`length_struct\['m'\]\['x'\]` must be"):
        FirstFitPacker({"t": 4, "m": {"x": 0}}, 2, meta_features=["m"])
    with pytest.raises(
        TypeError, match=r"`length_struct\['m'\]` must be an int"
    ):  # no nesting in this packer
        ConcatThenSplitPacker({"t": 4, "m": {"x": 2}}, meta_features=["m"])
    packer = FirstFitPacker({"t": 4, "m": {"x": 2}}, 1, meta_features=["m"], padding_struct={"m": {"x": -1}})
    source = [{"t": np.arange(2), "m": {"x": np.int64(7)}}, {"t": np.arange(1), "m": {"x": np.int64(8)}}]
    ((row, _),) = packer.pack(source)
    assert row["m"]["x"].tolist() == [7, 8]
    assert sorted(row) == ["m", "t", "t_positions", "t_segment_ids"]
    with pytest.raises(ValueError, match=r"lacks the features \[\('m', 'x'\)\]"):
        list(packer.pack([{"t": np.arange(2), "m": {}}]))

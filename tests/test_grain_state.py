"""`set_state()` takes the state Grain 0.2.18's own DataLoader saved: a job moves from Grain mid-run.

Grain's workers each read every `W`-th record and its state records, for each
worker, the last record it delivered, so after a run with several workers
the records delivered are not a prefix of the walk. aioloader resumes such a
state with every record Grain had not delivered, each once, in walk order
(whatever its own worker count), and its own states say the same in Grain's
fields. The states come from the real Grain (`tests/support/grain_states.py`,
run with the 3.11 session's interpreter, where Grain installs); the checks of
malformed states build Grain's format by hand and run on every build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.grain_reference import grain_python
from tests.support import grain_states
from tests.support.grain_states import CUTS, RUNS, loader
from tests.support.reference import assert_same_outputs

REPO = Path(__file__).resolve().parent.parent
Record = tuple[int, int]  # (key, first draw of its generator): unique in a walk


@pytest.fixture(scope="module")
def grain_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], dict[str, Any]]:
    """Grain's outputs and states for each of `RUNS`, from the real Grain."""
    grain_python()
    out = tmp_path_factory.mktemp("grain") / "runs.json"
    done = subprocess.run(
        [sys.executable, grain_states.__file__, str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {(run["pipeline"], run["worker_count"]): run for run in json.loads(out.read_text())}


def flat(outputs: list[Any]) -> list[Record]:
    """The records of outputs (batches or single records), in order."""
    found: list[Record] = []
    for output in outputs:
        array = np.asarray(output)
        found += [(int(k), int(d)) for k, d in (array.reshape(-1, 2).tolist())]
    return found


def resumed(name: str, workers: int, state: Any, count: int | None = None) -> tuple[list[Any], bytes]:
    """aioloader's outputs after `set_state(state)` (`count` of them, or all), and its state then."""
    with iter(loader(al, name, workers)) as iterator:
        iterator.set_state(state)
        outputs = [next(iterator) for _ in range(count)] if count is not None else list(iterator)
        return outputs, iterator.get_state()


def walk_order(name: str) -> list[Record]:
    """Every record of pipeline `name` in walk order: aioloader's worker_count=0 pass."""
    return flat(list(loader(al, name, 0)))


@pytest.mark.parametrize(("name", "grain_workers"), RUNS, ids=[f"{n}-grain{w}" for n, w in RUNS])
def test_grains_run_at_worker_count_0_is_aioloaders(
    grain_runs: dict[tuple[str, int], dict[str, Any]], name: str, grain_workers: int
) -> None:
    if grain_workers == 0:
        assert flat(grain_runs[name, 0]["outputs"]) == walk_order(name)
    else:  # the same records, in another order
        assert sorted(flat(grain_runs[name, grain_workers]["outputs"])) == sorted(walk_order(name))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize(("name", "grain_workers"), RUNS, ids=[f"{n}-grain{w}" for n, w in RUNS])
def test_a_grain_state_resumes_with_no_record_lost_or_repeated(
    grain_runs: dict[tuple[str, int], dict[str, Any]], name: str, grain_workers: int, cut: int, workers: int
) -> None:
    run = grain_runs[name, grain_workers]
    if str(cut) not in run["states"]:
        pytest.skip(f"Grain's run gave fewer than {cut} outputs")
    state = run["states"][str(cut)].encode()
    ours, _ = resumed(name, workers, state)
    before, after = flat(run["outputs"][:cut]), flat(ours)
    order = {record: position for position, record in enumerate(walk_order(name))}
    assert sorted(before + after) == sorted(order), "a record lost or repeated"
    positions = [order[record] for record in after]
    assert positions == sorted(positions), "the records left are read in walk order"
    if grain_workers <= 1:  # Grain's order is aioloader's: the very batches Grain gives next
        assert [flat([output]) for output in ours] == [flat([output]) for output in run["outputs"][cut:]]


@pytest.mark.parametrize("steps", [1, 2, 3, 6])
def test_a_state_taken_among_the_records_grains_workers_left_resumes_again(
    grain_runs: dict[tuple[str, int], dict[str, Any]], steps: int
) -> None:
    state = grain_runs["batched", 3]["states"]["5"].encode()
    everything, _ = resumed("batched", 0, state)
    head, middle = resumed("batched", 2, state, steps)
    tail, _ = resumed("batched", 0, middle)
    assert_same_outputs(head + tail, everything)
    fields = json.loads(middle)
    left_behind = "leftovers" in fields["aioloader"]
    assert fields["worker_count"] == (3 if left_behind else 0)
    assert len(fields["last_seen_indices"]) == (3 if left_behind else 1)


def test_grains_worker_count_0_loader_resumes_from_aioloaders_state() -> None:
    gp = grain_python()
    with iter(loader(al, "batched", 2)) as iterator:
        for _ in range(4):
            next(iterator)
        state = iterator.get_state()
        ours = list(iterator)
    theirs = iter(loader(gp, "batched", 0))
    theirs.set_state(state)
    assert_same_outputs(ours, list(theirs))


# Grain's format built by hand (see aioloader/_iteration/grain_state.py), on every build.

SAMPLER = al.IndexSampler(30, shuffle=True, num_epochs=2, seed=3)


def grain_state(seen: dict[str, int], workers: int, **changes: Any) -> bytes:
    state = {
        "version": 2,
        "last_seen_indices": seen,
        "last_worker_index": -1,
        "worker_count": workers,
        "sampler": repr(SAMPLER),
        "data_source": repr(al.RangeDataSource(0, 30)),
        **changes,
    }
    return json.dumps(state, indent=4).encode()


@pytest.mark.parametrize("workers", [0, 3])
def test_a_hand_made_grain_state_of_three_workers_resumes_their_leftovers(workers: int) -> None:
    # Workers 0, 1, 2 delivered positions up to 21, 10 and 2 (every third from their own).
    state = grain_state({"0": 21, "1": 10, "2": 2}, 3)
    order = walk_order("batched")
    last = {0: 21, 1: 10, 2: 2}  # the last position each worker delivered
    delivered = {p for p in range(60) if p <= last[p % 3]}
    ours, _ = resumed("batched", workers, state)
    assert flat(ours) == [order[p] for p in range(60) if p not in delivered]


def test_a_hand_made_grain_state_of_one_worker_is_a_position() -> None:
    ours, _ = resumed("batched", 2, grain_state({"0": 11}, 0))
    assert flat(ours) == walk_order("batched")[12:]


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (grain_state({"0": 11}, 0, version=3), "has version 3"),
        (grain_state({"0": 11}, 0, sampler="IndexSampler(num_records=31)"), "another sampler"),
        (
            grain_state({"0": 11}, 0, data_source="RangeDataSource(start=0, stop=31, step=1)"),
            "another data_source",
        ),
        (grain_state({"0": 11, "1": 12}, 0), r"each of Grain's 1 workers"),
        (grain_state({"0": 11}, 3), r"each of Grain's 3 workers"),
        (grain_state({"0": "11"}, 0), r"an index of this loader's shard"),
        (grain_state({"0": 11, "1": 11, "2": 11}, 3), r"not an index Grain's worker 0 of 3 reads"),
        (grain_state({"0": -5}, 0), r"not an index Grain's worker 0"),
        (grain_state({"0": 60}, 0), "past the end"),
        (grain_state({"0": 11}, 0, worker_count=True), r"`state\['worker_count'\]` must be an int"),
        (grain_state({"0": 11}, 0, last_worker_index=None), r"`state\['last_worker_index'\]` must be an int"),
        (b"\xff\xfe not json", "not the JSON that get_state"),
        (b"[1, 2]", "JSON bytes holding an object"),
    ],
    ids=[
        "version",
        "sampler",
        "source",
        "extra-worker",
        "missing-workers",
        "str-index",
        "off-lattice",
        "negative",
        "past-end",
        "bool-count",
        "no-last-worker",
        "not-json",
        "not-an-object",
    ],
)
def test_malformed_grain_states_are_a_clear_value_error(state: bytes, message: str) -> None:
    iterator = iter(loader(al, "batched", 0))
    with pytest.raises(ValueError, match=message):
        iterator.set_state(state)
    assert len(list(iterator)) == 15, "a refused state leaves the iterator where it was"


def test_a_grain_state_of_another_shard_is_refused() -> None:
    # Shard 1 of 3 reads global indices 1, 4, 7, ...: an index of shard 0 is not one of them.
    state = grain_state({"0": 3}, 0, sampler=repr(al.IndexSampler(41, al.ShardOptions(1, 3), True, 2, 5)))
    state = state.replace(b"stop=30", b"stop=41")
    with pytest.raises(ValueError, match=r"shard 1 of 3, got 3: was the state saved by another shard"):
        iter(loader(al, "sharded-filtered", 0)).set_state(state)


def test_workers_too_far_apart_are_not_a_grain_state() -> None:
    sampler = al.IndexSampler(10**9, num_epochs=1)
    big = al.DataLoader(data_source=al.RangeDataSource(0, 10**9), sampler=sampler)
    state = {
        "version": 2,
        "last_seen_indices": {"0": 3 * 10**8, "1": 1},
        "last_worker_index": 0,
        "worker_count": 2,
        "sampler": repr(sampler),
        "data_source": repr(al.RangeDataSource(0, 10**9)),
    }
    with pytest.raises(ValueError, match="a Grain loader's workers stay within a few batches"):
        iter(big).set_state(json.dumps(state).encode())


@pytest.mark.parametrize(
    "form", ["bytes", "str", "decoded", "aioloader-part"], ids=["bytes", "str", "decoded-dict", "v2-dict"]
)
def test_set_state_takes_every_form_of_a_state(form: str) -> None:
    with iter(loader(al, "batched", 2)) as iterator:
        for _ in range(3):
            next(iterator)
        state = iterator.get_state()
        rest = list(iterator)
    given: Any = {
        "bytes": state,
        "str": state.decode(),
        "decoded": json.loads(state),
        "aioloader-part": json.loads(state)["aioloader"],
    }[form]
    outputs, _ = resumed("batched", 0, given)
    assert_same_outputs(outputs, rest)


def test_aioloaders_leftovers_are_checked() -> None:
    state = json.loads(state_after_five_batches())
    state["aioloader"]["leftovers"] = [0, "x"]
    with pytest.raises(ValueError, match=r"`state\['leftovers'\]` must be a list of two or more ints"):
        iter(loader(al, "batched", 0)).set_state(json.dumps(state).encode())
    state["aioloader"]["leftovers"] = [30, 31, 32]  # position 20's worker had delivered up to 30
    with pytest.raises(ValueError, match=r"which its leftovers .* say was delivered already"):
        iter(loader(al, "batched", 0)).set_state(json.dumps(state).encode())


def state_after_five_batches() -> bytes:
    """aioloader's state after 5 batches of pipeline `batched` (position 20)."""
    with iter(loader(al, "batched", 0)) as iterator:
        for _ in range(5):
            next(iterator)
        return iterator.get_state()

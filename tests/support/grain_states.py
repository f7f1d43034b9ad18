"""Run Grain 0.2.18's own DataLoader and record its outputs and checkpoint states.

    python tests/support/grain_states.py OUT.json

For each (pipeline, `worker_count`) of `RUNS`, iterates Grain's loader to
the end and writes, as JSON: the records of each
output (each record as `[key, first draw of its generator]`, unique in a
walk), and `get_state()` after each count of outputs in `CUTS`. Grain's
workers are processes (spawned), so this runs as a script of its own rather
than inside pytest; `tests/test_grain_state.py` runs it with the 3.11
session's interpreter and resumes aioloader from the states.

The pipelines are written once, over the module of names (`grain.python` or
`aioloader`), so that the test builds aioloader's with the same code.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import aioloader as al

try:
    import grain.python as gp
except ImportError:  # aioloader's side of the pipelines is used on every build
    gp = None

# Grain's runs (worker processes take seconds each to start here: few runs use them);
# the states are taken after these many outputs.
RUNS = (
    ("batched", 0),
    ("batched", 1),
    ("batched", 3),
    ("sharded-filtered", 0),
    ("sharded-filtered", 3),
    ("records", 0),
    ("records", 3),
)
CUTS = (0, 1, 2, 3, 5, 8)


def tag(element: Any, rng: np.random.Generator) -> np.ndarray:
    """The record's key and the first draw of its generator: which record it is."""
    return np.array([int(element), int(rng.integers(0, 2**31))], dtype=np.int64)


def keep(element: np.ndarray) -> bool:
    return int(element[0]) % 3 != 0


class Tag(al.RandomMapTransform):
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return tag(element, rng)


class Keep(al.FilterTransform):
    def filter(self, element: Any) -> bool:
        return keep(element)


# Grain's worker processes unpickle the operations: Grain's classes live at module level too.
if gp is not None:

    class GrainTag(gp.RandomMapTransform):
        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return tag(element, rng)

    class GrainKeep(gp.FilterTransform):
        def filter(self, element: Any) -> bool:
            return keep(element)


def operations(pg: Any, name: str) -> list[Any]:
    """The operations of pipeline `name`, made of `pg`'s classes."""
    tag_op, keep_op = (Tag(), Keep()) if pg is al else (GrainTag(), GrainKeep())
    return {
        "batched": [tag_op, pg.Batch(4)],
        "sharded-filtered": [tag_op, keep_op, pg.Batch(2)],
        "records": [tag_op],
    }[name]


def loader(pg: Any, name: str, worker_count: int) -> Any:
    """Pipeline `name` with `pg`'s classes: Grain's (`grain.python`) or aioloader's."""
    if name == "sharded-filtered":
        sampler = pg.IndexSampler(41, pg.ShardOptions(1, 3), shuffle=True, num_epochs=2, seed=5)
    elif name == "records":
        sampler = pg.SequentialSampler(25, seed=1)
    else:
        sampler = pg.IndexSampler(30, shuffle=True, num_epochs=2, seed=3)
    return pg.DataLoader(
        data_source=pg.RangeDataSource(0, 41 if name == "sharded-filtered" else 30, 1),
        sampler=sampler,
        operations=operations(pg, name),
        worker_count=worker_count,
    )


def records(output: Any) -> list[list[int]]:
    """The records of one output, as `[key, draw]` pairs."""
    array = np.asarray(output)
    return [array.tolist()] if array.ndim == 1 else array.tolist()


def run(pg: Any, name: str, worker_count: int) -> dict[str, Any]:
    iterator = iter(loader(pg, name, worker_count))
    outputs: list[list[list[int]]] = []
    states: dict[str, str] = {}
    while True:
        if len(outputs) in CUTS:
            states[str(len(outputs))] = iterator.get_state().decode()
        try:
            outputs.append(records(next(iterator)))
        except StopIteration:
            break
    close = getattr(iterator._iterator, "close", None)  # Grain's worker processes
    if close is not None:
        close()
    return {"pipeline": name, "worker_count": worker_count, "outputs": outputs, "states": states}


def main(out: str) -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain reads absl flags; outside an absl app nobody parses them
        flags.FLAGS.mark_as_parsed()
    assert gp is not None, "this script needs Grain 0.2.18"
    runs = [run(gp, name, count) for name, count in RUNS]
    with open(out, "w") as file:
        json.dump(runs, file)


if __name__ == "__main__":
    main(sys.argv[1])

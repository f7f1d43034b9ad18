"""The steps a program is made of, each with one name that every part uses.

A segment is a run of `(step, argument)` pairs. `Program` runs them through
its dispatch tables (`_SYNC_STEPS`, `_ASYNC_STEPS`); the subinterpreter
executor sends `Step.READ` and `Step.BEFORE` to its subinterpreters, whose
worker has a table of its own for those two (its programs do not fuse
`Step.READ_MAPS`). Statistics count `READ_MAPS` under the steps it stands
for: `(READ, 0)` and `(BEFORE, i)` for each map. The argument is an
operation's index in `Operations.before`/`after` for the operation steps,
and 0 for the others.
"""

from __future__ import annotations

import enum


class Step(enum.Enum):
    """One step of a segment, with what it takes and gives."""

    KEYS = "keys"  # ChunkJob -> RecordChunk: the sampler's keys for the chunk
    READ = "read"  # RecordChunk: its records, from a random-access source
    READ_MAPS = "read_maps"  # RecordChunk: READ, then the maps `before[:n]`, record by record
    AREAD = "aread"  # RecordChunk: its records, awaited from an async source
    BEFORE = "before"  # Run: operation `before[i]`
    ABEFORE = "abefore"  # Run: the `async def` map `before[i]`, awaited
    AFTER = "after"  # Run: operation `after[i]`
    AAFTER = "aafter"  # Run: the `async def` map `after[i]`, awaited
    RECORDS_OUT = "records_out"  # RecordChunk -> Outputs (no `Batch`)
    ELEMENTS_OUT = "elements_out"  # RecordChunk -> Elements (the tail plan's RECORDS stage)
    FUSE = "fuse"  # RecordChunk -> BatchRun: whole batches (the fused plan)
    BATCH = "batch"  # BatchJob -> BatchRun (the tail plan's BATCHES stage)
    BATCHES_OUT = "batches_out"  # BatchRun -> Outputs

    # Members are singletons compared by identity, so identity's hash is right,
    # and it is computed in C: Enum's own `__hash__` is a Python call, paid on
    # every dispatch and every count of every step of every chunk.
    __hash__ = object.__hash__

    @property
    def on_loop(self) -> bool:
        """True for the steps that are awaited on an event loop rather than run on a worker."""
        return self in _AWAITED


_AWAITED = frozenset({Step.AREAD, Step.ABEFORE, Step.AAFTER})

StepCall = tuple[Step, int]  # a step and its argument

"""Chunk sizes: how many sampler indices travel to a worker at once.

Per-chunk hand-offs between threads cost tens of microseconds, so a chunk
should be about two milliseconds of work (CPU time: waiting for I/O or for the
GIL is not work), and at most `WALL_SECONDS` of wall time, so that records
that wait do not gather by the hundred on one worker; how long a record
takes is only known once some have been
processed. The first chunk is one record (or one batch), so the first output
comes as soon as possible and its cost is measured before any other chunk is
sized (the pipeline waits for it); later chunks are sized from the measured
cost per record, and bounded in bytes by what the earlier chunks' outputs held
(records that stay in the caches from their transform to their batch). Chunking
never changes the output: records get their generator from their index, and
fused chunks always hold whole batches.
"""

from __future__ import annotations

from typing import Any

from aioloader._common.positions import Position
from aioloader._program.jobs import ChunkJob
from aioloader._program.program import Plan, Program
from aioloader._scheduling.tail import TailBatcher

# A chunk's bookkeeping costs about 50 us on 3.13t (no specialising interpreter): 1 ms
# chunks cost 5-10% of mid-sized records' work (the tokenizer: 32 records of 17 us a
# chunk), 2 ms ones gain it back; 3 ms ones slowed NumPy images inline by a quarter (two
# 64-image batches a chunk no longer fit the caches).
TARGET_SECONDS = 0.002
WALL_SECONDS = 0.01  # ... and at most this much wall time (see `ChunkPlanner.next_size`)
# ... and its outputs at most this many bytes: a chunk's records stay in the core's caches
# from their transform to their batch. 64x64x3 float32 images, in 2 ms chunks of two
# 32-image batches (3 MiB), ran at 0.67x a plain loop inline on an AMD EPYC (3.11), and at
# 0.94x in chunks of one batch; on 3.13t 0.70x and 0.79x, and 0.95x and 1.01x with 2 workers.
CHUNK_BYTES = 1 << 20
# ... and the chunks in flight, past one a worker and two more, at most this many bytes of
# outputs together (see `Scheduler._room_locked`).
WINDOW_BYTES = 8 << 20
FIRST_CHUNK_RECORDS = 1


class ChunkPlanner:
    """Cuts the sampler's indices from a position into `ChunkJob`s.

    `multiple` is the batch size when chunks must hold whole batches (else 1):
    every chunk but the sampler's last holds a multiple of it;
    `max_records` caps a chunk so that several fit in the prefetch window;
    `first_records` is the first chunk's size before that rounding and cap
    (more than one only for what `start_prefetch()` reads early).
    """

    def __init__(
        self,
        position: Position,
        length: int | None,
        multiple: int,
        max_records: int,
        first_records: int = FIRST_CHUNK_RECORDS,
    ) -> None:
        self._next, self._skip, self._skip_outputs = position
        self._length, self._multiple = length, multiple
        self.limit(max_records)
        self._first = first_records
        self._seconds_per_record: float | None = None
        self._wall_per_round: float | None = None  # wall time of one record, or of `at_once` together
        self._at_once = 1
        self._bytes_per_record: float | None = None

    def limit(self, max_records: int) -> None:
        """Cap later chunks at `max_records` (rounded down to whole multiples, at least one)."""
        self._max = max(self._multiple, max_records // self._multiple * self._multiple)

    def observe(
        self, records: int, seconds: float, wall: float = 0.0, nbytes: int = 0, at_once: int = 1
    ) -> None:
        """Record that a chunk of `records` took `seconds` of CPU time and `wall` seconds, and
        made outputs of about `nbytes` (0: not known, see `output_bytes`); its reads waited
        `at_once` at a time (the read pool's threads, when it read them)."""
        if records <= 0:
            return
        self._seconds_per_record = _smoothed(self._seconds_per_record, seconds / records)
        # `at_once` records wait together: a chunk of them takes about `ceil(records / at_once)`
        # rounds of one record's wait.
        self._at_once = max(1, at_once)
        rounds = -(-records // self._at_once)
        self._wall_per_round = _smoothed(self._wall_per_round, wall / rounds)
        if nbytes > 0:
            self._bytes_per_record = _smoothed(self._bytes_per_record, nbytes / records)

    @property
    def bytes_per_record(self) -> float | None:
        """The bytes of output a record made in the chunks so far (None: not known yet)."""
        return self._bytes_per_record

    def next_size(self) -> int:
        """How many records the next chunk should hold (a multiple of `multiple`)."""
        if self._seconds_per_record is None:
            wanted = self._first
        else:
            # A chunk of records that wait (a map that calls a server) would hold hundreds of
            # records on one worker for a second: its wall time is bounded too, but never below
            # one round of reads (records read 16 at once by the read pool, in chunks of one,
            # waited one at a time: 10 ms reads ran no faster than with no pool).
            wanted = int(TARGET_SECONDS / max(self._seconds_per_record, 1e-9))
            rounds = max(1, int(WALL_SECONDS / max(self._wall_per_round or 0.0, 1e-9)))
            wanted = min(wanted, rounds * self._at_once)
            if self._bytes_per_record is not None:
                wanted = min(wanted, int(CHUNK_BYTES / self._bytes_per_record))
        # Whole multiples that fit the target, at least one: rounding up would double a chunk
        # whose batch takes a little over half the target, and the memory it holds with it.
        multiples = max(1, wanted // self._multiple)
        return min(multiples * self._multiple, self._max)

    def peek(self) -> int:
        """How many records the next chunk will hold; 0 once the sampler is exhausted."""
        if self._length is None:
            return self.next_size()
        return max(0, min(self.next_size(), self._length - self._next))

    def next_job(self) -> ChunkJob | None:
        """The next chunk, or None once the sampler is exhausted."""
        count = self.peek()
        if count == 0:
            return None
        job = ChunkJob(self._next, count, self._skip, self._skip_outputs)
        self._next += count
        self._skip = self._skip_outputs = 0
        return job


def plan_chunks(
    program: Program, position: Position, max_records: int, first_records: int = FIRST_CHUNK_RECORDS
) -> tuple[ChunkPlanner, TailBatcher | None]:
    """How both drivers cut `program`'s work from `position`: its chunk planner, and its tail.

    Fused chunks hold whole batches (their sizes are multiples of the batch
    size); the tail plan cuts batches after the `RECORDS` stage, starting
    with the `skip_outputs` of `position`.
    """
    batch = program.operations.batch
    multiple = batch.batch_size if program.plan is Plan.FUSED and batch is not None else 1
    planner = ChunkPlanner(position, program.sampler.length, multiple, max_records, first_records)
    tail = TailBatcher(batch, position[2]) if program.plan is Plan.TAIL and batch is not None else None
    return planner, tail


def _smoothed(previous: float | None, sample: float) -> float:
    return sample if previous is None else 0.7 * previous + 0.3 * sample


def output_bytes(payload: Any) -> int:
    """About how many bytes a chunk's outputs hold (its `items`): the first one's, as arrays
    count them (`nbytes`; bytes and str by length, through dicts, tuples and lists), times
    their number; 0 where the first holds none of those."""
    items = getattr(payload, "items", None)
    if not items:
        return 0
    return _nbytes(items[0], 3) * len(items)


def _nbytes(value: Any, depth: int) -> int:
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if depth and isinstance(value, dict):
        return sum(_nbytes(item, depth - 1) for item in value.values())
    if depth and isinstance(value, (list, tuple)):
        return sum(_nbytes(item, depth - 1) for item in value)
    return 0

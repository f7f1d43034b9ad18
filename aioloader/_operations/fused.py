"""A chunk's reads and the maps after them, record by record, in one loop made for them.

`apply` runs each operation over a whole run before the next (op-major). For
the leading maps of a pipeline (`map`, `random_map`) this module runs the
read and those maps record by record instead, as a plain loop does:

    for x in keys:
        x = get(x)                 # source[key]
        x = f0(x)                  # a map
        x = f1(x, r1(len(out)))    # a random map, with its record's generator
        append(x)

One record is in flight at a time, so its temporaries are freed before the
next one is read, and it costs a plain loop's instructions, with no list
between two operations. The loop is compiled once per sequence of kinds, as
`dataclasses` compiles its methods: a loop over a tuple of functions costs
20-30 ns an operation and a record more than a straight line (measured on
CPython 3.11 and 3.13t), about a third of a plain loop's whole cost.

Which stage raised is read from the traceback: each stage has a line of its
own, and the loop's frame is the first entry of the traceback of an error it
catches, so the loop keeps no counter. A StopIteration is returned like any
error, for the caller to turn into one (see `_common/calls`).

A close must not wait for a whole chunk, yet reading `shutdown.closing`
before every record costs 20-30 ns (measured on 3.11 and 3.13t), a tenth of
a trivial record's whole cost. So the untimed loop reads it before each
block of records, a block being as many records as the probe below says
take about `BLOCK_SECONDS` (one record when they are slow): a close waits
for at most one block. Records slower than the probe's (a cache that
stops hitting) stretch the wait, up to `MAX_BLOCK` of them.

Statistics want each operation's time apart. Timing every call would cost
two clock reads a call, as much as a trivial record's whole work; so the
first `PROBE_RECORDS` records of each chunk run through a timed twin of the
loop, and the caller shares the chunk's time among the stages as the
probe's was.
"""

from __future__ import annotations

import functools
import linecache
import time
from collections.abc import Callable, Sequence
from typing import Any

from aioloader._common.calls import Shutdown, Stopped
from aioloader._operations.transforms import Kind, Op

PROBE_RECORDS = 2  # records of each chunk timed stage by stage
BLOCK_SECONDS = 200e-6  # records between two reads of the shutdown flag, in time
# ... and in count: the most records a close may wait for, should they turn slow after the
# probe (a cache that stops hitting). 64 costs 1-2 ns a record more than 256 (3.11, 3.13t).
MAX_BLOCK = 64

Loop = Callable[..., tuple[int, Exception | None]]


class FusedMaps:
    """The leading maps of one program copy (`ops`, its own), with their loops (compiled
    once for each sequence of kinds, and shared: they hold no state)."""

    def __init__(self, ops: Sequence[Op]) -> None:
        kinds = tuple(op.kind for op in ops)
        self.ops = list(ops)
        self.functions = tuple(op.function() for op in ops)
        self.random = any(kind is Kind.RANDOM_MAP for kind in kinds)  # generators wanted
        self.no_rngs: tuple[None, ...] = (None,) * len(ops)
        self._loops = {
            (reads, timed): compile_loop(kinds, reads, timed)
            for reads in (False, True)
            for timed in (False, True)
        }

    def run(
        self,
        out: list[Any],
        inputs: Sequence[Any],
        get: Callable[[Any], Any] | None,
        rngs: Sequence[Callable[[int], Any] | None],
        shutdown: Shutdown,
        clock: Callable[[], float] = time.perf_counter,
    ) -> tuple[int, Exception | None, list[float]]:
        """Append to `out`, for each input, the maps' result (of `get(input)` if `get` is
        given, else of the input); the first `PROBE_RECORDS` are timed by `clock`.

        Returns the stage that raised (0 the read, if any, then each map; -1:
        none) with its error, `out` then holding the results before the failing
        input; and each stage's seconds over the probed inputs. Raises `Stopped`
        once `shutdown` is set, before the next block of inputs (`block_size`).
        """
        reads = get is not None
        spent = [0.0] * (len(self.functions) + reads)
        probed = inputs[:PROBE_RECORDS]
        functions = self.functions
        stage, error = self._loops[reads, True](out, probed, get, functions, rngs, shutdown, spent, clock)
        if error is None and len(inputs) > len(probed):
            block = block_size(sum(spent) / len(probed))
            loop = self._loops[reads, False]
            stage, error = loop(out, inputs, get, functions, rngs, shutdown, len(probed), block)
        return stage, error, spent


def block_size(seconds_per_record: float) -> int:
    """Records per read of the shutdown flag, for records that take `seconds_per_record`."""
    if seconds_per_record <= 0.0:
        return MAX_BLOCK
    return max(1, min(MAX_BLOCK, int(BLOCK_SECONDS / seconds_per_record)))


@functools.cache  # once per process: 0.3 ms a loop on 3.13t, for each worker's copy before
def compile_loop(kinds: tuple[Kind, ...], reads: bool, timed: bool) -> Loop:
    """The loop for maps of `kinds` (MAP or RANDOM_MAP), after a read of each input if `reads`.

    `loop(out, inputs, get, functions, rngs, shutdown, spent, clock)`: see
    `FusedMaps.run`; a random map `i` is also given `rngs[i](j)`, the
    generator of element `j` (`len(out)`). With `timed`, stage `s` adds its
    seconds by `clock()` to `spent[s]`, and `shutdown` is read before each
    input. Without, the last two arguments are `start, block`: the loop runs
    `inputs[start:]` (a sequence), reading `shutdown` before each `block`.
    """
    stages = ["x = get(x)"] if reads else []
    for i, kind in enumerate(kinds):
        stages.append(f"x = f{i}(x, r{i}(len(out)))" if kind is Kind.RANDOM_MAP else f"x = f{i}(x)")
    lines = _header(len(kinds), timed)
    indent = " " * (12 if timed else 16)  # a stage's line: inside the loop over inputs
    stage_of_line: dict[int, int] = {}
    for stage, line in enumerate(stages):
        lines.append(f"{indent}{line}")
        stage_of_line[len(lines)] = stage  # line numbers count from 1
        if timed:
            lines += [
                f"{indent}now = clock()",
                f"{indent}spent[{stage}] += now - then",
                f"{indent}then = now",
            ]
    lines += [
        f"{indent}append(x)",
        "    except Exception as error:",
        "        return stage_of_line[error.__traceback__.tb_lineno], error",
        "    return -1, None",
    ]
    source = "\n".join(lines) + "\n"
    name = f"<aioloader: {'read and ' if reads else ''}{len(kinds)} maps{', timed' if timed else ''}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)  # shown in tracebacks
    namespace: dict[str, Any] = {"Stopped": Stopped, "stage_of_line": stage_of_line}
    exec(compile(source, name, "exec"), namespace)
    loop: Loop = namespace["loop"]
    return loop


def _header(maps: int, timed: bool) -> list[str]:
    unpack = [
        f"    ({''.join(f'f{i}, ' for i in range(maps))}) = functions",
        f"    ({''.join(f'r{i}, ' for i in range(maps))}) = rngs",
        "    append = out.append",
        "    try:",
    ]
    if timed:
        return [
            "def loop(out, inputs, get, functions, rngs, shutdown, spent, clock):",
            *unpack,
            "        for x in inputs:",
            "            if shutdown.closing:",
            "                raise Stopped",
            "            then = clock()",
        ]
    return [
        "def loop(out, inputs, get, functions, rngs, shutdown, start, block):",
        *unpack,
        "        for first in range(start, len(inputs), block):",
        "            if shutdown.closing:",
        "                raise Stopped",
        "            for x in inputs[first:first + block]:",
    ]

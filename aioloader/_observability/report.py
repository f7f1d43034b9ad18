"""Where the time goes: the stage that limits a loader's throughput, and what to change.

The verdict reads the consumer first: a consumer that seldom waits for its
next output is the bottleneck itself, and no loader setting will help.
Otherwise the loader is behind, and the stage with the most busy time
(summed over the threads that ran it) is what limits it; the advice says
which option gives that stage more threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aioloader._observability.statistics import LoaderStatistics

# Below this share of its time waiting, the consumer is not held back by the loader.
CONSUMER_WAITS = 0.1


def bottleneck(statistics: LoaderStatistics) -> tuple[str, str]:
    """(the stage that limits throughput, what to change)."""
    share = statistics.consumer_wait_share
    if share < CONSUMER_WAITS:
        return "consumer", (
            f"the consumer is the bottleneck: it waited {share:.0%} of its time for data; "
            "the loader is fast enough"
        )
    stages = [s for s in statistics.stages if s.name != "consumer"]
    if not stages or max(s.busy_seconds for s in stages) <= 0:
        return "consumer", f"the consumer waited {share:.0%} of its time, but no stage was timed"
    slowest = max(stages, key=lambda s: s.busy_seconds)
    return slowest.name, _advice(statistics, slowest.name, share)


def _advice(statistics: LoaderStatistics, name: str, share: float) -> str:
    waits = f"the consumer waited {share:.0%} of its time for data; {name} takes the most time"
    if name == "device_put":
        return f"{waits}: the transfer to the device limits throughput (fewer or larger batches help)"
    if name == "read" and (statistics.inline or statistics.worker_count > 0 or statistics.read_threads > 0):
        # Where the consumer's thread runs the chunks too (`worker_count=0`, or the tuner's
        # choice): slow reads go to the read threads, engaged once reads were seen waiting.
        return (
            f"{waits}: reads wait: raise `ReadOptions.num_threads` "
            f"(now {statistics.read_threads}), or `worker_count` if reads are CPU work"
        )
    if statistics.inline:
        return (
            f"{waits}: the consumer's thread runs the chunks, as it was measured faster than the "
            "workers for this pipeline (records cheaper than a hand-off between threads, or work "
            'that holds the GIL); on a GIL build, `executor="interpreter"` runs pure Python in parallel'
        )
    if statistics.worker_count == 0:
        return f"{waits}: run it on worker threads (`worker_count` > 0)"
    return f"{waits}: raise `worker_count` (now {statistics.worker_count})"


def summary(statistics: LoaderStatistics) -> str:
    """Each stage's figures, each kind of thread's time, the buffers, then the verdict."""
    inline = ", the consumer's thread runs the chunks" if statistics.inline else ""
    lines = [
        f"aioloader statistics after {statistics.elapsed_seconds:.2f} s "
        f"({statistics.worker_count} workers, {statistics.read_threads} read threads{inline})"
    ]
    lines += [
        f"  stage {s.name}: {s.items} items, {s.items_per_second:,.0f}/s, busy {s.busy_seconds:.3f} s"
        for s in statistics.stages
    ]
    lines += [
        f"  {t.name} ({t.count}): busy {t.busy_seconds:.3f} s, waiting for input "
        f"{t.waiting_for_input_seconds:.3f} s, for room {t.waiting_for_room_seconds:.3f} s"
        for t in statistics.threads
    ]
    lines += [f"  buffer {b.name}: {b.in_use}/{b.capacity} (peak {b.peak})" for b in statistics.buffers]
    stage, advice = bottleneck(statistics)
    lines.append(f"bottleneck: {stage}: {advice}")
    return "\n".join(lines)

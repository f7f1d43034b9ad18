"""Observability: per-thread counters, statistics snapshots, the bottleneck report, metrics export.

The counters (`meter`) sit low in the layers, just above `_common`, because
the pipeline's own stages (program steps, scheduler waits, the device
thread) count into them; the snapshot and the report only read them.
"""

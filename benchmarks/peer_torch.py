"""PyTorch's `DataLoader` (worker processes) at its best settings for these workloads.

The dataset defines `__getitems__`, so each worker fetches a whole batch in
one call (through the source's own `__getitems__` where it has one);
batches become tensors in the worker (`torch.from_numpy`, no copy), which
PyTorch hands to the main process through shared memory. Workers are
forked (the Linux default); each holds its own copy of the transform.
`prefetch_factor` gives each worker its share of the same read-ahead budget
as the other loaders.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.loaders import PREFETCH, read_batch
from benchmarks.workloads import Workload


class Records(Dataset[Any]):
    """`source[i]` through the transform, one record or a whole batch at a time."""

    def __init__(self, source: Any, transform: Any) -> None:
        self.source, self.transform = source, transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        return self.transform(self.source[index])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        transform = self.transform
        return [transform(r) for r in read_batch(self.source, indices)]


def to_tensor(collate: Callable[[Sequence[Any]], np.ndarray], items: Sequence[Any]) -> torch.Tensor:
    return torch.from_numpy(collate(items))


def prefetch_factor(workload: Workload, workers: int) -> int | None:
    return None if workers == 0 else max(2, PREFETCH // workload.batch_size // workers)


def batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    loader = DataLoader(
        Records(source, transform),
        batch_size=workload.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=workers,
        collate_fn=functools.partial(to_tensor, workload.collate),
        prefetch_factor=prefetch_factor(workload, workers),
    )
    for batch in loader:
        yield batch.numpy()


def settings(workload: Workload, workers: int) -> str:
    where = f"num_workers={workers} (fork)" if workers else "num_workers=0"
    factor = prefetch_factor(workload, workers)
    return where + ", __getitems__, tensors" + (f", prefetch_factor={factor}" if factor else "")

"""`async for batch in loader`: the same pipeline, while another task keeps running."""

import asyncio

import numpy as np

import aioloader as al


class Augment(al.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        noise = rng.normal(size=4).astype(np.float32)
        return {"x": np.full(4, x, np.float32) + noise, "y": np.int32(x % 2)}


async def heartbeat(ticks: list[int]) -> None:
    while True:  # runs while the workers read and transform
        ticks.append(1)
        await asyncio.sleep(0.001)


async def main() -> None:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 1000),
        sampler=al.IndexSampler(1000, shuffle=True, num_epochs=2, seed=0),
        operations=[Augment(), al.Batch(32, drop_remainder=True)],
        worker_count=2,
    )
    ticks: list[int] = []
    beat = asyncio.create_task(heartbeat(ticks))
    count = 0
    async for batch in loader:
        count += 1
    beat.cancel()
    print(count, "batches of", batch["x"].shape, "; heartbeats meanwhile:", len(ticks))


asyncio.run(main())

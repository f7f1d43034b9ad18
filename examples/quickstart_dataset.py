"""The same pipeline in Grain's Dataset form: shuffle, a random map and a batch, on 2 worker threads."""

import numpy as np

import aioloader as al


class Augment(al.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        noise = rng.normal(size=4).astype(np.float32)  # the element's own generator
        return {"x": np.full(4, x, np.float32) + noise, "y": np.int32(x % 2)}


dataset = (
    al.MapDataset.range(1000)
    .shuffle(seed=0)  # a new order every epoch
    .repeat(2)
    .to_iter_dataset()  # read in order; what follows runs on the engine's workers
    .random_map(Augment(), seed=0)
    .batch(32, drop_remainder=True)
    .prefetch(2)  # any worker count gives the same batches
)
with iter(dataset) as batches:
    for step, batch in enumerate(batches):
        if step == 10:
            state = batches.get_state()  # small JSON: save it with the model
print(step + 1, "batches of", batch["x"].shape, "; resume from", state["dataset"]["loader"]["position"])

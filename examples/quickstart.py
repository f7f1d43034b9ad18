"""`for batch in loader`: shuffle, a random map and a batch, on 2 worker threads."""

import numpy as np

import aioloader as al


class Augment(al.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        noise = rng.normal(size=4).astype(np.float32)  # the record's own generator
        return {"x": np.full(4, x, np.float32) + noise, "y": np.int32(x % 2)}


loader = al.DataLoader(
    data_source=al.RangeDataSource(0, 1000),
    sampler=al.IndexSampler(1000, shuffle=True, num_epochs=2, seed=0),
    operations=[Augment(), al.Batch(32, drop_remainder=True)],
    worker_count=2,  # any count gives the same batches
)
with iter(loader) as batches:
    for step, batch in enumerate(batches):
        if step == 10:
            state = batches.get_state()  # a few hundred bytes of JSON, as Grain's: save them with the model
with iter(loader) as resumed:
    resumed.set_state(state)  # the batches after the eleventh, with any worker_count
    print(step + 1, "batches of", batch["x"].shape, ";", len(list(resumed)), "after the checkpoint")

"""The device stage: batches on JAX devices, ahead of the consumer, sharded, with clear errors."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from aioloader import Batch, DataLoader, DevicePut, IndexSampler, RangeDataSource  # noqa: E402
from tests.conftest import repeated, wait_for_no_threads  # noqa: E402
from tests.support.reference import ToDict, assert_same_outputs  # noqa: E402


def host_and_device(workers: int, device_put: DevicePut | None, batch: int = 8, n: int = 64) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, n),
        sampler=IndexSampler(n, shuffle=True, seed=3, num_epochs=1),
        operations=[ToDict(), Batch(batch)],
        worker_count=workers,
        device_put=device_put,
    )


def to_host(tree: Any) -> Any:
    return jax.tree.map(np.asarray, tree)


def as_jax_would(host_batches: list[Any]) -> list[Any]:
    """The host batches as JAX holds them (dict keys sorted, 64-bit types narrowed)."""
    return [to_host(jax.device_put(b)) for b in host_batches]


def mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("batch",))


def test_there_are_eight_cpu_devices() -> None:
    assert len(jax.devices()) == 8  # XLA_FLAGS from conftest


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_arrive_as_device_arrays_equal_to_the_host_batches(workers: int) -> None:
    host = list(host_and_device(workers, None))
    device = list(host_and_device(workers, DevicePut()))
    assert all(isinstance(leaf, jax.Array) for b in device for leaf in jax.tree.leaves(b))
    assert_same_outputs([to_host(b) for b in device], as_jax_would(host))


@pytest.mark.parametrize("workers", [0, 3])
def test_sharded_batches_equal_the_host_batches_leaf_by_leaf(workers: int) -> None:
    sharding = NamedSharding(mesh(), P("batch"))
    host = list(host_and_device(workers, None))
    device = list(host_and_device(workers, DevicePut(sharding=sharding)))
    for batch in device:
        for leaf in jax.tree.leaves(batch):
            assert leaf.sharding == sharding
            assert len(leaf.addressable_shards) == 8
    assert_same_outputs([to_host(b) for b in device], as_jax_would(host))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_async_for_with_device_put(workers: int) -> None:
    got = [to_host(b) async for b in host_and_device(workers, DevicePut())]
    assert_same_outputs(got, as_jax_would(list(host_and_device(0, None))))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transfer_error_names_the_position_and_the_leaf(workers: int) -> None:
    sharding = NamedSharding(mesh(), P("batch"))
    loader = host_and_device(
        workers, DevicePut(sharding=sharding), batch=8, n=60
    )  # the last batch has 4 rows
    got = []
    try:
        for batch in loader:
            got.append(batch)
    except ValueError as error:  # JAX's own error type and text
        notes = "\n".join(error.__notes__)
    else:
        raise AssertionError("no error")
    assert len(got) == 7
    assert "['x']" in notes or "['pair']" in notes
    assert "index=60" in notes


class CountingDevicePut(DevicePut):
    """Counts transfers, to compare them with what the consumer took."""

    lock = threading.Lock()
    transfers = 0
    threads: ClassVar[set[str]] = set()

    def transfer(self, batch: Any, position: Any) -> Any:
        with CountingDevicePut.lock:
            CountingDevicePut.transfers += 1
            CountingDevicePut.threads.add(threading.current_thread().name)
        return super().transfer(batch, position)

    def transfer_all(self, batches: list[Any]) -> list[Any] | None:
        moved = super().transfer_all(batches)
        if moved is not None:  # else `transfer` counts them, one by one
            with CountingDevicePut.lock:
                CountingDevicePut.transfers += len(batches)
                CountingDevicePut.threads.add(threading.current_thread().name)
        return moved


def ahead_once_the_stage_catches_up(taken: int, wanted: int) -> int:
    """How far the transfers got ahead of `taken` outputs, waiting (up to 10 s) for `wanted`."""
    deadline = time.monotonic() + 10
    while CountingDevicePut.transfers - taken < wanted and time.monotonic() < deadline:
        time.sleep(0.001)
    return CountingDevicePut.transfers - taken


@repeated
@pytest.mark.parametrize("buffer_size", [1, 3])
def test_transfers_run_buffer_size_ahead_and_no_further(buffer_size: int, repeat: int) -> None:
    CountingDevicePut.transfers = 0
    loader = host_and_device(2, CountingDevicePut(buffer_size=buffer_size), batch=2, n=200)
    worst = 0
    with iter(loader) as iterator:
        for taken, _ in enumerate(iterator, start=1):
            if taken % 10 == 0 and taken <= 80:  # a slow step now and then, with 20+ batches to come
                # The stage runs ahead while the consumer is busy: the buffer fills.
                assert ahead_once_the_stage_catches_up(taken, buffer_size) >= buffer_size
            worst = max(worst, CountingDevicePut.transfers - taken)
    # Waiting in the buffer, plus the one the device thread holds while the buffer is full.
    assert worst <= buffer_size + 1


@pytest.mark.parametrize("buffer_size", [1, 3])
def test_inline_transfers_stay_within_buffer_size_too(buffer_size: int) -> None:
    # worker_count=0 transfers in the consumer's thread: once a whole chunk (here 100 batches)
    # at its first batch, so the device held a chunk's worth whatever the bound.
    CountingDevicePut.transfers = 0
    loader = host_and_device(0, CountingDevicePut(buffer_size=buffer_size), batch=2, n=200)
    ahead = []
    with iter(loader) as iterator:
        for taken, _ in enumerate(iterator, start=1):
            ahead.append(CountingDevicePut.transfers - taken)
    assert len(ahead) == 100
    assert max(ahead) == buffer_size - 1  # this one taken, the rest of its group on the device


@pytest.mark.asyncio
async def test_inline_transfers_stay_within_buffer_size_with_async_for() -> None:
    CountingDevicePut.transfers = 0
    ahead = []
    taken = 0
    async for _ in host_and_device(0, CountingDevicePut(buffer_size=2), batch=2, n=200):
        taken += 1
        ahead.append(CountingDevicePut.transfers - taken)
    assert (len(ahead), max(ahead)) == (100, 1)


@pytest.mark.asyncio
async def test_transfers_run_on_the_device_thread_not_the_loop() -> None:
    CountingDevicePut.threads = set()
    assert len([b async for b in host_and_device(2, CountingDevicePut())]) == 8
    assert len(CountingDevicePut.threads) == 1
    assert next(iter(CountingDevicePut.threads)).startswith("aioloader-device-")


def test_resume_with_device_put() -> None:
    wanted = as_jax_would(list(host_and_device(0, None)))
    with iter(host_and_device(2, DevicePut())) as first:
        head = [to_host(next(first)) for _ in range(3)]
        state = first.get_state()
    with iter(host_and_device(1, DevicePut())) as second:
        second.set_state(state)
        tail = [to_host(b) for b in second]
    assert_same_outputs(head + tail, wanted)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_consumer_s_jax_settings_hold_on_the_device_thread(workers: int) -> None:
    # `jax.enable_x64` and `jax.default_device` hold for the thread that enters them: the
    # device thread once transferred with JAX's global settings (int64 batches narrowed or
    # refused, batches on device 0) where worker_count=0 followed the consumer's.
    n, device = 16, jax.devices()[3]
    loader = DataLoader(
        data_source=RangeDataSource(2**40, 2**40 + n),
        sampler=IndexSampler(n, shuffle=False, num_epochs=1),
        operations=[Batch(4)],
        worker_count=workers,
        device_put=DevicePut(),
    )
    with jax.enable_x64(True), jax.default_device(device):
        batches = list(loader)
    assert [(b.dtype, int(b[0]), b.devices()) for b in batches] == [
        (np.int64, 2**40 + i, {device}) for i in range(0, n, 4)
    ]


def test_bad_device_put_arguments() -> None:
    with pytest.raises(ValueError, match="`buffer_size` must be greater than or equal to 1, got 0"):
        DevicePut(buffer_size=0)
    with pytest.raises(TypeError, match=r"`sharding` must be a jax\.sharding\.Sharding"):
        DevicePut(sharding="data")  # type: ignore[arg-type, unused-ignore]


class GroupsDevicePut(DevicePut):
    """Records the size of each group the device thread puts in one call."""

    groups: ClassVar[list[int]] = []

    def transfer_all(self, batches: list[Any]) -> list[Any] | None:
        GroupsDevicePut.groups.append(len(batches))
        return super().transfer_all(batches)


def odd_batch(elements: list[int]) -> Any:
    """Leaves of mixed float widths, 0-d arrays, and a leaf that is a list of arrays."""
    values = np.array(elements)
    return {
        "f32": values.astype(np.float32),
        "f64": values.astype(np.float64) / 3,
        "zero_d": np.array(values.sum(), dtype=np.float32),
        "scalar": np.float64(values[0]),
        "list": [values.astype(np.int32), np.zeros((len(elements), 2), np.float16)],
    }


def odd_loader(workers: int, device_put: DevicePut | None, n: int = 120, fn: Any = odd_batch) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, n),
        sampler=IndexSampler(n, shuffle=True, seed=5, num_epochs=1),
        operations=[Batch(2, batch_fn=fn)],
        worker_count=workers,
        device_put=device_put,
    )


@pytest.mark.parametrize("buffer_size", [1, 4])
@pytest.mark.parametrize("workers", [0, 2])
def test_odd_leaves_arrive_as_jax_would_put_them_in_groups_or_not(workers: int, buffer_size: int) -> None:
    GroupsDevicePut.groups = []
    device = list(odd_loader(workers, GroupsDevicePut(buffer_size=buffer_size)))
    assert_same_outputs([to_host(b) for b in device], as_jax_would(list(odd_loader(0, None))))
    assert all(isinstance(leaf, jax.Array) for b in device for leaf in jax.tree.leaves(b))
    if workers:  # at most as many in one call as the buffer takes
        assert max(GroupsDevicePut.groups, default=1) <= buffer_size


def with_a_string(elements: list[int]) -> Any:
    return {"x": np.array(elements), "name": np.array([str(e) for e in elements], dtype=object)}


def with_a_huge_id(elements: list[int]) -> Any:
    return {"x": np.array(elements), "id": np.array(elements, np.int64) + (2**40 if 40 in elements else 0)}


def collect(loader: DataLoader, into: list[Any]) -> None:
    for batch in loader:
        into.append(batch)


@pytest.mark.parametrize(
    ("fn", "error", "leaf"), [(with_a_string, TypeError, "['name']"), (with_a_huge_id, ValueError, "['id']")]
)
@pytest.mark.parametrize("buffer_size", [1, 4])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_leaf_jax_cannot_take_is_named_in_groups_too(
    workers: int, buffer_size: int, fn: Any, error: type[Exception], leaf: str
) -> None:
    """The batches before it arrive; the error names the leaf and the batch's position."""
    loader = odd_loader(workers, DevicePut(buffer_size=buffer_size), fn=fn)
    host = list(odd_loader(0, None, fn=fn))
    bad = next(b for b, batch in enumerate(host) if leaf == "['name']" or 40 in batch["x"])
    got: list[Any] = []
    with pytest.raises(error) as raised:
        collect(loader, got)
    assert len(got) == bad
    text = "\n".join([str(raised.value), *getattr(raised.value, "__notes__", [])])
    assert leaf in text
    assert f"index={2 * (bad + 1)}" in text


class SlowGroups(DevicePut):
    """A grouped transfer that takes a while: the consumer closes during it."""

    started: ClassVar[threading.Event] = threading.Event()

    def transfer_all(self, batches: list[Any]) -> list[Any] | None:
        SlowGroups.started.set()
        time.sleep(0.3)
        return super().transfer_all(batches)


def test_close_from_another_thread_during_a_grouped_transfer() -> None:
    SlowGroups.started = threading.Event()
    with iter(host_and_device(2, SlowGroups(buffer_size=4), batch=2, n=4000)) as iterator:
        taken = [next(iterator)]
        while not SlowGroups.started.is_set():  # the consumer keeps up: the buffer has room for groups
            taken.append(next(iterator))
        closer = threading.Thread(target=iterator.close)
        started = time.monotonic()
        closer.start()  # while the device thread is inside a grouped transfer
        closer.join(5)
        assert not closer.is_alive()
        assert time.monotonic() - started < 2.5
        assert not wait_for_no_threads(2.0)
        rest = list(iterator)  # at most what was handed over, then the end
        assert len(rest) <= 4
    assert all(isinstance(leaf, jax.Array) for b in taken for leaf in jax.tree.leaves(b))


def rows_that_change(elements: list[int]) -> Any:
    """Batch `b` has `b % 12 + 1` rows: more signatures than `_Placer` compiles placements for."""
    rows = elements[0] // 2 % 12 + 1
    return {"x": np.full((rows, 3), elements[0], np.float32), "ids": np.array(elements, np.int32)}


@pytest.mark.parametrize("replicated", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_of_many_shapes_arrive_as_jax_would_put_them(workers: int, replicated: bool) -> None:
    """Signatures seen again go through the compiled placement, at most PLACED_SIGNATURES of
    them; the others, and each one's first batch, through jax.device_put: the same arrays,
    the same sharding, committed alike."""
    from aioloader._device.device_put import PLACED_SIGNATURES

    sharding = NamedSharding(mesh(), P()) if replicated else None
    device_put = DevicePut(sharding=sharding)
    device = list(odd_loader(workers, device_put, n=240, fn=rows_that_change))
    assert_same_outputs(
        [to_host(b) for b in device], as_jax_would(list(odd_loader(0, None, 240, rows_that_change)))
    )
    for batch in device:
        for leaf in jax.tree.leaves(batch):
            assert leaf.committed is replicated
            assert leaf.sharding == sharding if replicated else leaf.devices() == {jax.devices()[0]}
    placed = [s for s, seen in device_put._placer._seen.items() if seen == "placed"]
    assert len(placed) == PLACED_SIGNATURES  # 12 signatures, each seen 10 times


def test_a_placed_batch_is_a_copy_of_the_host_arrays() -> None:
    """Changing the host arrays after the transfer changes nothing on the device."""
    device_put = DevicePut(sharding=NamedSharding(mesh(), P("batch")))
    host = {"x": np.arange(16, dtype=np.float32).reshape(8, 2)}
    device_put.transfer(host, (1, 0, 0))  # the signature seen once: jax.device_put
    second = device_put.transfer(host, (1, 0, 0))
    assert list(device_put._placer._seen.values()) == ["placed"]
    host["x"][:] = -1
    np.testing.assert_array_equal(np.asarray(second["x"]), np.arange(16, dtype=np.float32).reshape(8, 2))


@repeated
def test_one_device_put_shared_by_loaders_in_two_threads(repeat: int) -> None:
    """Two loaders with one DevicePut, iterated at once from two threads: each gets its own
    batches, whichever of them compiled a signature's placement first."""
    device_put = DevicePut(sharding=NamedSharding(mesh(), P("batch")), buffer_size=1)
    wanted = as_jax_would(list(host_and_device(0, None, batch=8, n=400)))
    got: dict[int, list[Any]] = {}
    errors: list[BaseException] = []

    def take(workers: int) -> None:
        try:
            got[workers] = [to_host(b) for b in host_and_device(workers, device_put, batch=8, n=400)]
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=take, args=(workers,)) for workers in (0, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    for batches in got.values():
        assert_same_outputs(batches, wanted)
    assert sorted(got) == [0, 2]
    assert list(device_put._placer._seen.values()) == ["placed"]

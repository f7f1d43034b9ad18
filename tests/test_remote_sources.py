"""The file-based sources over s3:// URLs, against SeaweedFS on 127.0.0.1: the same records as the
local files, a batch in one round of concurrent requests, errors that name the URL, a server
that stops mid-run, a resume once it is back, and credentials that show nowhere."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioloader import (
    ArrayRecordDataSource,
    Batch,
    DataLoader,
    FilesDataSource,
    IndexSampler,
    ParquetDataSource,
    ReadOptions,
)
from aioloader._sources.arrayrecord.riegeli import FormatError
from tests.support.arrayrecord_files import DAMAGE, GRAIN_LAYOUT, OPTIONS, SHARDS, Spec, offsets_to_damage
from tests.support.object_store import FaultProxy, S3Place
from tests.support.outputs import collect_async, drain, notes
from tests.support.reference import assert_same_outputs
from tools.seaweedfs import SeaweedServer

ROW_GROUP = 50
# A loader that reads little ahead, so that what happens to the server mid-run reaches its reads.
SHORT_READ_AHEAD = ReadOptions(num_threads=4, prefetch_buffer_size=8)


@pytest.fixture(scope="module")
def bucket(
    s3_server: SeaweedServer, array_record_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> S3Place:
    """Every ArrayRecord test file, a Parquet file and small files, uploaded once for the module."""
    place = S3Place(s3_server)
    for spec in [*OPTIONS, *SHARDS, GRAIN_LAYOUT]:
        place.upload(array_record_dir / spec.file_name, f"ar/{spec.file_name}")
    place.upload(parquet_file(tmp_path_factory.mktemp("parquet") / "rows.parquet"), "rows.parquet")
    for i in range(40):
        place.put(f"files/{i:03}.bin", file_bytes(i))
    place.put("not-a-format.bin", b"PAR1 this is neither ArrayRecord nor Parquet " * 2000)
    return place


def file_bytes(i: int) -> bytes:
    return bytes([i % 251]) * (100 + i)


def parquet_file(path: Path, **options: Any) -> Path:
    ids = np.arange(400)
    table = pa.table(
        {
            "id": ids,
            "name": [f"row {i}" for i in ids],
            "tokens": pa.array([list(range(i, i + 5)) for i in ids], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path, row_group_size=ROW_GROUP, **options)
    return path


def shuffled(count: int, seed: int = 0) -> list[int]:
    keys = list(range(count))
    random.Random(seed).shuffle(keys)
    return keys


# ArrayRecord


@pytest.mark.parametrize("spec", [*OPTIONS, GRAIN_LAYOUT], ids=lambda spec: spec.name)
def test_array_record_objects_hold_what_the_files_hold(bucket: S3Place, spec: Spec) -> None:
    records = spec.records()
    with ArrayRecordDataSource(
        bucket.url(f"ar/{spec.file_name}"), storage_options=bucket.options()
    ) as source:
        assert source.reader == "builtin"
        assert len(source) == len(records)
        keys = shuffled(len(records))
        assert source.__getitems__(keys) == [records[k] for k in keys]
        assert [source[k] for k in keys[:5]] == [records[k] for k in keys[:5]]


def test_a_glob_reads_the_shards_in_sorted_order(bucket: S3Place) -> None:
    records = [record for spec in SHARDS for record in spec.records()]
    with ArrayRecordDataSource(
        bucket.url("ar/shard-*.array_record"), storage_options=bucket.options()
    ) as source:
        assert source.paths == tuple(bucket.url(f"ar/{spec.file_name}") for spec in SHARDS)
        keys = shuffled(len(records))
        assert source.__getitems__(keys) == [records[k] for k in keys]


def test_a_batch_of_records_is_one_round_of_concurrent_requests(
    bucket: S3Place, fault_proxy: FaultProxy
) -> None:
    records = GRAIN_LAYOUT.records()
    place = bucket.through(fault_proxy)
    with ArrayRecordDataSource(
        place.url(f"ar/{GRAIN_LAYOUT.file_name}"), storage_options=place.options()
    ) as source:
        keys = shuffled(len(records))[:48]
        fault_proxy.reset_counts()
        fault_proxy.delay = 0.2
        assert source.__getitems__(keys) == [records[k] for k in keys]
        # One chunk per record: chunks next to each other in the file are one request.
        runs = 1 + int(np.count_nonzero(np.diff(sorted(keys)) > 1))
        assert fault_proxy.requests == runs
        assert fault_proxy.peak >= min(8, runs)  # one after another, the peak would be 1
        assert source.storage_statistics().ranges >= len(keys)


def test_array_record_opening_errors_name_the_url(bucket: S3Place) -> None:
    missing = bucket.url("ar/missing.array_record")
    with pytest.raises(FileNotFoundError, match=re.escape(f"`{missing}` does not exist")):
        ArrayRecordDataSource(missing, storage_options=bucket.options())
    with pytest.raises(FileNotFoundError, match=r"`paths\[0\]` matches no object: 's3://.*/ar/none-\*'"):
        ArrayRecordDataSource(bucket.url("ar/none-*"), storage_options=bucket.options())
    other = bucket.url("not-a-format.bin")
    with pytest.raises(FormatError, match=re.escape(f"`{other}` is not a valid ArrayRecord file")):
        ArrayRecordDataSource(other, storage_options=bucket.options())
    with pytest.raises(ValueError, match=r"`reader='array_record'` reads local files only"):
        ArrayRecordDataSource(missing, reader="array_record", storage_options=bucket.options())
    wrong = bucket.options(secret="not-the-secret-key-at-all")
    url = bucket.url(f"ar/{GRAIN_LAYOUT.file_name}")
    with pytest.raises(PermissionError, match=re.escape(f"`{url}`: access denied")) as caught:
        ArrayRecordDataSource(url, storage_options=wrong)
    assert "not-the-secret-key-at-all" not in str(caught.value)


def test_credentials_and_endpoint_come_from_the_environment(
    bucket: S3Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = bucket.options()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", options["endpoint_url"])
    monkeypatch.setenv("AWS_REGION", options["region"])
    with ArrayRecordDataSource(bucket.url(f"ar/{GRAIN_LAYOUT.file_name}")) as source:
        assert source[3] == GRAIN_LAYOUT.records()[3]


def test_a_closed_source_cannot_be_read(bucket: S3Place) -> None:
    source = ArrayRecordDataSource(
        bucket.url(f"ar/{GRAIN_LAYOUT.file_name}"), storage_options=bucket.options()
    )
    source.close()
    source.close()
    with pytest.raises((ValueError, RuntimeError), match="closed"):
        source.__getitems__([1, 2])


# Parquet


def test_parquet_objects_hold_what_the_file_holds(bucket: S3Place, tmp_path: Path) -> None:
    local = ParquetDataSource(parquet_file(tmp_path / "rows.parquet"))
    with ParquetDataSource(bucket.url("rows.parquet"), storage_options=bucket.options()) as remote:
        assert len(remote) == len(local) == 400
        keys = shuffled(400)
        assert_same_outputs(remote.__getitems__(keys), local.__getitems__(keys))
        assert_same_outputs([remote[k] for k in keys[:3]], [local[k] for k in keys[:3]])
    columns = ["tokens", "id"]
    with ParquetDataSource(bucket.url("rows.parquet"), columns, storage_options=bucket.options()) as remote:
        assert_same_outputs(
            remote.__getitems__(keys[:60]), ParquetDataSource(local.paths, columns).__getitems__(keys[:60])
        )


def test_a_batch_of_rows_fetches_each_row_group_once(bucket: S3Place, fault_proxy: FaultProxy) -> None:
    place = bucket.through(fault_proxy)
    with ParquetDataSource(place.url("rows.parquet"), storage_options=place.options()) as source:
        groups = {0, 2, 5, 7}  # none next to another: row groups side by side would be one request
        keys = [key for key in shuffled(400) if key // ROW_GROUP in groups][:30]
        fault_proxy.reset_counts()
        rows = source.__getitems__(keys)
        assert [int(row["id"]) for row in rows] == keys
        # A row group's column chunks lie side by side: one request each, none for the footer again.
        assert fault_proxy.requests == len(groups)
        fault_proxy.reset_counts()
        source.__getitems__(keys)
        assert fault_proxy.requests == 0  # decoded row groups are cached


def test_parquet_opening_errors_name_the_url(bucket: S3Place) -> None:
    other = bucket.url("not-a-format.bin")
    with pytest.raises(ValueError, match=re.escape(f"`{other}` is not a readable Parquet file")):
        ParquetDataSource(other, storage_options=bucket.options())
    missing = bucket.url("missing.parquet")
    with pytest.raises(FileNotFoundError, match=re.escape(f"`{missing}` does not exist")):
        ParquetDataSource(missing, storage_options=bucket.options())


# Damaged objects: verified as local files are, the error naming the URL


def rows_or_error(make: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Every record of the source `make(*args, **kwargs)`, or the message of the ValueError raised."""
    try:
        with make(*args, **kwargs) as source:
            return source.__getitems__(list(range(len(source))))
    except ValueError as error:
        return str(error)


def assert_same_as_local(remote: Any, local: Any, url: str, path: Path) -> None:
    """The remote read gave the local read's records, or its error with the URL for the path."""
    if isinstance(local, str):
        assert remote == local.replace(str(path), url)
    else:
        assert_same_outputs(remote, local)


DAMAGE_BY_NAME = {spec.name: spec for spec in DAMAGE}


@pytest.mark.parametrize("name", ["damage-single", "damage-grouped"])
def test_a_changed_bit_in_an_array_record_object_is_caught_as_in_the_file(
    bucket: S3Place, array_record_dir: Path, tmp_path: Path, name: str
) -> None:
    spec = DAMAGE_BY_NAME[name]
    whole, options, errors = (array_record_dir / spec.file_name).read_bytes(), bucket.options(), 0
    path = tmp_path / spec.file_name
    for offset in offsets_to_damage(whole, 12):
        damaged = bytearray(whole)
        damaged[offset] ^= 1 << (offset % 8)
        path.write_bytes(damaged)
        url = bucket.put(f"damaged/{offset}-{spec.file_name}", bytes(damaged))
        local = rows_or_error(ArrayRecordDataSource, path, reader="builtin")
        remote = rows_or_error(ArrayRecordDataSource, url, storage_options=options)
        assert_same_as_local(remote, local, url, path)
        if isinstance(remote, str):
            assert re.search(rf"`{re.escape(url)}`.*\bbytes? \d+", remote), remote
            errors += 1
        else:
            assert remote == spec.records(), offset
    assert errors > 0


def test_a_damaged_chunk_read_alone_or_through_the_loader_names_the_url(
    bucket: S3Place, array_record_dir: Path
) -> None:
    spec = DAMAGE_BY_NAME["damage-single"]
    whole, records = (array_record_dir / spec.file_name).read_bytes(), spec.records()
    damaged = bytearray(whole)
    damaged[whole.index(records[-1][-10:])] ^= 0x20  # inside the last record's value, stored as is
    url, last = bucket.put("damaged/single.array_record", bytes(damaged)), len(records) - 1
    message = rf"`{re.escape(url)}`: chunk {last} \(record {last}\) at byte \d+ is damaged: .*hash"
    with ArrayRecordDataSource(url, storage_options=bucket.options()) as source:
        assert source.__getitems__([0, 1, 2]) == records[:3]  # the other chunks stay readable
        with pytest.raises(ValueError, match=message):
            source[last]  # fetched by the file itself
        with pytest.raises(ValueError, match=message):
            source.__getitems__([0, last])  # fetched beforehand, with the others of the batch
        got, error = drain(
            DataLoader(data_source=source, sampler=IndexSampler(len(records), num_epochs=1), worker_count=2)
        )
        assert got == records[:last]
        assert re.search(message, str(error)), error
        assert f"record_key={last}" in notes(error)
    options = bucket.options()
    with ArrayRecordDataSource(url, storage_options=options, verify_checksums=False) as unverified:
        assert unverified[last] != records[last]  # what the opt-out costs, here as on a disk


def test_a_changed_bit_in_a_parquet_object_is_caught_as_in_the_file(bucket: S3Place, tmp_path: Path) -> None:
    whole = parquet_file(tmp_path / "good.parquet", write_page_checksum=True, compression="none").read_bytes()
    path, options, errors = tmp_path / "damaged.parquet", bucket.options(), 0
    for offset in random.Random(5).sample(range(4, len(whole)), 40):
        damaged = bytearray(whole)
        damaged[offset] ^= 1 << (offset % 8)
        path.write_bytes(damaged)
        url = bucket.put(f"damaged/{offset}.parquet", bytes(damaged))
        local = rows_or_error(ParquetDataSource, path)
        remote = rows_or_error(ParquetDataSource, url, storage_options=options)
        assert_same_as_local(remote, local, url, path)
        errors += isinstance(remote, str)
    assert errors > 10


@pytest.mark.parametrize("kind", ["arrayrecord", "parquet"])
def test_a_request_that_fails_while_decoding_is_the_storage_error_not_damage(
    bucket: S3Place, fault_proxy: FaultProxy, kind: str
) -> None:
    place = bucket.through(fault_proxy)
    name = "rows.parquet" if kind == "parquet" else f"ar/{OPTIONS[0].file_name}"
    url, make = place.url(name), ParquetDataSource if kind == "parquet" else ArrayRecordDataSource
    with make(url, storage_options=place.options(retries=0)) as source:
        expected = source.__getitems__([3, 4, len(source) - 1])
        source.close()
    with make(url, storage_options=place.options(retries=0)) as source:
        fault_proxy.fail(10_000, 403)
        denied = re.escape(f"`{url}`: access denied")
        with pytest.raises(PermissionError, match=denied):
            source[3]  # read while decoding (Parquet: by pyarrow, through the blob)
        with pytest.raises(PermissionError, match=denied):
            source.__getitems__([4, len(source) - 1])  # fetched before decoding
        fault_proxy.heal()
        assert_same_outputs(source.__getitems__([3, 4, len(source) - 1]), expected)
        source.close()
        with pytest.raises(ValueError, match=re.escape(f"`{url}` was closed")):
            source[3]


# Files


def test_files_are_read_whole_with_for_and_async_for(bucket: S3Place) -> None:
    with FilesDataSource(bucket.url("files/*.bin"), storage_options=bucket.options()) as source:
        assert len(source) == 40
        assert source[7] == file_bytes(7)
        sampler = IndexSampler(40, shuffle=True, seed=1, num_epochs=1)
        loader = DataLoader(data_source=source, sampler=sampler, worker_count=2)
        order = [int(k) for k in sampler.record_keys(0, 40)]
        assert list(loader) == [file_bytes(k) for k in order]
        assert asyncio.run(collect_async(loader)) == [file_bytes(k) for k in order]


def test_a_missing_file_fails_its_record_in_order(bucket: S3Place) -> None:
    urls = [bucket.url(f"files/{i:03}.bin") for i in range(5)]
    urls[3] = bucket.url("files/missing.bin")
    with FilesDataSource(urls, storage_options=bucket.options()) as source:
        got, error = drain(
            DataLoader(data_source=source, sampler=IndexSampler(5, num_epochs=1), worker_count=2)
        )
    assert got == [file_bytes(i) for i in range(3)]
    assert isinstance(error, FileNotFoundError)
    assert urls[3] in str(error)
    assert "record_key=3" in notes(error)


# Through the loader


def local_and_remote(kind: str, bucket: S3Place, array_record_dir: Path, tmp_path: Path) -> tuple[Any, Any]:
    if kind == "arrayrecord":
        name = GRAIN_LAYOUT.file_name
        return (
            ArrayRecordDataSource(array_record_dir / name),
            ArrayRecordDataSource(bucket.url(f"ar/{name}"), storage_options=bucket.options()),
        )
    return (
        ParquetDataSource(parquet_file(tmp_path / "rows.parquet")),
        ParquetDataSource(bucket.url("rows.parquet"), storage_options=bucket.options()),
    )


@pytest.mark.parametrize("kind", ["arrayrecord", "parquet"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_gives_the_same_batches_as_from_local_files(
    bucket: S3Place, array_record_dir: Path, tmp_path: Path, kind: str, workers: int
) -> None:
    local, remote = local_and_remote(kind, bucket, array_record_dir, tmp_path)

    def batches(source: Any) -> list[Any]:
        sampler = IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1)
        batch = Batch(16, batch_fn=list)
        return list(DataLoader(data_source=source, sampler=sampler, operations=[batch], worker_count=workers))

    with remote:
        assert_same_outputs(batches(remote), batches(local))


def test_transient_failures_mid_run_change_nothing(
    bucket: S3Place, array_record_dir: Path, fault_proxy: FaultProxy
) -> None:
    place = bucket.through(fault_proxy)
    records = GRAIN_LAYOUT.records()
    url = place.url(f"ar/{GRAIN_LAYOUT.file_name}")
    with ArrayRecordDataSource(url, storage_options=place.options(retries=4)) as source:
        sampler = IndexSampler(len(records), shuffle=True, seed=2, num_epochs=1)
        loader = DataLoader(
            data_source=source, sampler=sampler, worker_count=2, read_options=SHORT_READ_AHEAD
        )
        order = sampler.record_keys(0, len(records))
        got = []
        for i, record in enumerate(loader):
            got.append(record)
            if i in (10, 100):
                fault_proxy.fail(3, 503 if i == 10 else 0)
        assert got == [records[int(k)] for k in order]
        assert source.storage_statistics().retries >= 3


# A server that stops mid-run


def until_error(it: Any, outputs: list[Any] | None = None, states: list[Any] | None = None) -> Exception:
    """Go on with `it` (noting each output and the state after it) until it raises."""
    while True:
        try:
            output = next(it)
        except Exception as error:
            return error
        if outputs is not None and states is not None:
            outputs.append(output)
            states.append(it.get_state())


def sampler_for(count: int) -> IndexSampler:
    return IndexSampler(count, shuffle=True, seed=11, num_epochs=1)


def remote_source(kind: str, place: S3Place) -> Any:
    options = place.options(retries=1)
    if kind == "arrayrecord":
        return ArrayRecordDataSource(place.url(GRAIN_LAYOUT.file_name), storage_options=options)
    return FilesDataSource(place.url("files/*.bin"), storage_options=options)


@pytest.fixture
def stoppable(restartable_s3: SeaweedServer, array_record_dir: Path) -> Iterator[S3Place]:
    """A folder on the module's own server, which the test may stop; it runs again afterwards."""
    restartable_s3.start()
    place = S3Place(restartable_s3)
    place.upload(array_record_dir / GRAIN_LAYOUT.file_name)
    for i in range(120):
        place.put(f"files/{i:03}.bin", file_bytes(i))
    yield place
    restartable_s3.start()


@pytest.mark.parametrize("kind", ["arrayrecord", "files"])
def test_a_server_stopped_mid_run_ends_the_loader_and_a_fresh_one_resumes(
    stoppable: S3Place, kind: str
) -> None:
    operations = [Batch(4, batch_fn=list)]
    with remote_source(kind, stoppable) as source:
        wanted = list(DataLoader(data_source=source, sampler=sampler_for(len(source)), operations=operations))
        count = len(source)
        got, states = [], []
        loader = DataLoader(
            data_source=source,
            sampler=sampler_for(count),
            operations=operations,
            worker_count=2,
            read_options=SHORT_READ_AHEAD,
        )
        with iter(loader) as it:
            for _ in range(5):
                got.append(next(it))
                states.append(it.get_state())
            stoppable.server.stop()
            error = until_error(it, got, states)
            assert isinstance(error, ConnectionError)
            assert f"{stoppable.server.endpoint} did not answer" in str(error)
            assert "aioloader: reading from" in notes(error)
            with pytest.raises(StopIteration):
                next(it)
    # Every batch delivered before the error is the right one.
    assert got == wanted[: len(got)]
    stoppable.server.start()
    stoppable.wait_until_readable(GRAIN_LAYOUT.file_name if kind == "arrayrecord" else "files/000.bin")
    with remote_source(kind, stoppable) as source:
        loader = DataLoader(
            data_source=source, sampler=sampler_for(count), operations=operations, worker_count=1
        )
        with iter(loader) as resumed:
            resumed.set_state(states[-1])
            assert got + list(resumed) == wanted


# Secrets


def test_credentials_show_nowhere_after_a_run_that_failed(
    bucket: S3Place, fault_proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    place = bucket.through(fault_proxy)
    options = place.options(retries=2)
    secret, key = options["secret"], options["key"]
    shown = []
    for make in (
        lambda: ArrayRecordDataSource(place.url(f"ar/{GRAIN_LAYOUT.file_name}"), storage_options=options),
        lambda: ParquetDataSource(place.url("rows.parquet"), storage_options=options),
        lambda: FilesDataSource(place.url("files/*.bin"), storage_options=options),
    ):
        with make() as source:
            loader = DataLoader(
                data_source=source,
                sampler=IndexSampler(len(source), shuffle=True, seed=4, num_epochs=1),
                worker_count=2,
            )
            with iter(loader) as iterator:
                shown.append(iterator.get_state())
                fault_proxy.fail(2, 503)  # retried, and logged
                fault_proxy.fail(10_000, 403)
                error = until_error(iterator)
            fault_proxy.heal()
            assert isinstance(error, PermissionError)
            assert source.storage_statistics().retries >= 1
            shown += [
                "".join(traceback.format_exception(error)),
                repr(source),
                repr(loader),
                repr(source.storage_statistics()),
                repr(source.cache_statistics()) if hasattr(source, "cache_statistics") else "",
            ]
    shown.append(caplog.text)
    for text in shown:
        assert secret not in str(text)
    # The key id is no secret to AWS, but aioloader shows it nowhere either (the logs of the client
    # libraries, at DEBUG level, may name it: they are not ours).
    for text in shown[:-1]:
        assert key not in str(text)

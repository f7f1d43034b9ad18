"""The storage layer under the sources: settings, URLs, merged ranges, and each S3 client against a
real server (SeaweedFS on 127.0.0.1): ranges, whole objects, listings, and how failures are told
apart, retried or raised at once."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator

import pytest

from aioloader._sources.storage.blobs import BlobFile, LocalBlob, RemoteBlob, open_blob, read_spans
from aioloader._sources.storage.settings import S3Settings, resolve
from aioloader._sources.storage.store import MAX_MERGED_BYTES, ObjectStore, merge
from aioloader._sources.storage.urls import ObjectUrl, check_scheme, glob_matcher, parse
from tests.conftest import repeated
from tests.support.object_store import CLIENTS, FaultProxy, S3Place

DATA = bytes(range(256)) * 64  # 16 KiB, every offset distinguishable


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def open_store(place: S3Place, client: str, **extra: object) -> ObjectStore:
    return ObjectStore(resolve(place.options(client=client, **extra)))


@pytest.fixture
def store(s3: S3Place, client: str) -> Iterator[ObjectStore]:
    store = open_store(s3, client)
    yield store
    store.close()


# Settings


def test_storage_options_come_before_the_environment() -> None:
    environ = {
        "AWS_ACCESS_KEY_ID": "env-key",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_REGION": "eu-west-3",
    }
    from_env = resolve(None, environ)
    assert (from_env.key, from_env.secret, from_env.endpoint_url, from_env.region) == (
        "env-key",
        "env-secret",
        "http://127.0.0.1:1",
        "eu-west-3",
    )
    given = resolve({"key": "k", "secret": "s", "client_kwargs": {"region_name": "ap-south-1"}}, environ)
    assert (given.key, given.secret, given.region, given.endpoint_url) == (
        "k",
        "s",
        "ap-south-1",
        "http://127.0.0.1:1",
    )
    assert resolve(
        {}, {"AWS_ENDPOINT_URL_S3": "http://a:1", "AWS_ENDPOINT_URL": "http://b:2"}
    ).endpoint_url == ("http://a:1")
    assert resolve({}, {}).region == "us-east-1"


def test_credentials_stay_out_of_the_repr() -> None:
    settings = resolve({"key": "AKIDSHOWNNOWHERE", "secret": "sekrit-value", "token": "tok-value"}, {})
    text = repr(settings)
    assert "sekrit-value" not in text
    assert "tok-value" not in text
    assert "AKIDSHOWNNOWHERE" not in text
    assert set(settings.secrets()) == {"AKIDSHOWNNOWHERE", "sekrit-value", "tok-value"}


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"secret": "s3cr3t-value", "passwrd": "x"}, ValueError, r"unknown keys \['passwrd'\]"),
        ({"key": "k"}, ValueError, "access key without the secret"),
        ({"secret": "s3cr3t-value"}, ValueError, "access secret without the key"),
        (
            {"endpoint_url": "127.0.0.1:9000"},
            ValueError,
            r"must be http\(s\)://host\[:port\], got '127.0.0.1:9000'",
        ),
        ({"endpoint_url": "http://me:s3cr3t-value@host:1"}, ValueError, "must not hold credentials"),
        ({"retries": -1}, ValueError, r"`storage_options\['retries'\]` must be an int from 0 to 20, got -1"),
        ({"max_requests": 0}, ValueError, r"\['max_requests'\]` must be an int from 1 to 1024, got 0"),
        ({"anon": "yes"}, TypeError, r"`storage_options\['anon'\]` must be True or False"),
        ({"client": "boto"}, ValueError, r"`storage_options\['client'\]` must be one of"),
        (
            {"key": "k", "secret": 12345},
            TypeError,
            r"`storage_options\['secret'\]` must be a str, got int\.$",
        ),
        ("key=k", TypeError, "`storage_options` must be a dict or None, got str"),
    ],
    ids=[
        "unknown",
        "key-alone",
        "secret-alone",
        "endpoint",
        "endpoint-userinfo",
        "retries",
        "max-requests",
        "anon",
        "client",
        "secret-type",
        "str",
    ],
)
def test_bad_storage_options_are_named_without_their_secrets(
    options: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as caught:
        resolve(options, {})
    assert "s3cr3t-value" not in str(caught.value)
    assert "12345" not in str(caught.value)


def test_a_client_that_is_not_installed_is_named() -> None:
    missing = next((name for name in ("obstore", "pyarrow", "s3fs") if name not in CLIENTS), None)
    if missing is None:
        pytest.skip("every client is installed here")
    with pytest.raises(ModuleNotFoundError, match=f"'{missing}', which is not installed"):
        ObjectStore(S3Settings(client=missing))


# URLs and globs


def test_urls_are_parsed_and_other_schemes_refused() -> None:
    assert parse("s3://bucket/a/b.bin") == ObjectUrl("bucket", "a/b.bin")
    assert str(ObjectUrl("bucket", "a/b.bin")) == "s3://bucket/a/b.bin"
    for bad in ("s3://bucket", "s3://bucket/", "s3:///key", "s3://b*/key"):
        with pytest.raises(ValueError, match="must be an s3://bucket/key URL"):
            parse(bad)
    with pytest.raises(
        ValueError, match=r"`paths\[2\]` uses the scheme 'gs://', which aioloader does not read"
    ):
        check_scheme("gs://bucket/key", "paths[2]")
    check_scheme("/local/file", "paths[0]")


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("d/*.bin", ["d/a.bin", "d/.bin"], ["d/e/a.bin", "d/a.bint", "a.bin"]),
        ("d/part-?[0-9].ar", ["d/part-a1.ar"], ["d/part-ab.ar", "d/part-/1.ar"]),
        ("d/[!x]*", ["d/a"], ["d/x1"]),
        ("**/*.bin", ["a.bin", "x/y/a.bin"], ["x/y/a.txt"]),
        ("d/**", ["d/a", "d/x/y"], ["e/a"]),
        ("d/a+b(1).bin", ["d/a+b(1).bin"], ["d/aab(1).bin"]),
    ],
)
def test_globs_match_as_fsspec_does(pattern: str, matches: list[str], misses: list[str]) -> None:
    match = glob_matcher(pattern).match
    assert all(match(key) for key in matches)
    assert not any(match(key) for key in misses)


# Merging ranges


def test_ranges_that_touch_or_overlap_are_merged_and_come_back_in_order() -> None:
    a, b = ObjectUrl("b", "a"), ObjectUrl("b", "b")
    ranges = [(a, 100, 200), (b, 0, 10), (a, 0, 100), (a, 150, 160), (a, 300, 400), (b, 10, 20)]
    merged, places = merge(ranges)
    assert merged == [(a, 0, 200), (a, 300, 400), (b, 0, 20)]
    assert places == [(0, 100), (2, 0), (0, 0), (0, 150), (1, 0), (2, 10)]


def test_merged_ranges_stay_bounded() -> None:
    a = ObjectUrl("b", "a")
    size = MAX_MERGED_BYTES // 3 + 1
    ranges = [(a, i * size, (i + 1) * size) for i in range(6)]
    merged, _ = merge(ranges)
    assert len(merged) == 3
    assert all(end - start <= MAX_MERGED_BYTES for _, start, end in merged)


# Each client against the server


def test_ranges_whole_objects_and_sizes(s3: S3Place, store: ObjectStore) -> None:
    url = parse(s3.put("data.bin", DATA))
    assert store.size(url) == len(DATA)
    assert store.read(url) == DATA
    ranges = [(url, 0, 1), (url, 5000, 9000), (url, 1, 4096), (url, 16000, 16384), (url, 100, 100)]
    assert store.fetch(ranges) == [DATA[s:e] for _, s, e in ranges]


def test_listing_a_glob(s3: S3Place, store: ObjectStore) -> None:
    for name in ("a/1.bin", "a/2.bin", "a/x/3.bin", "b/4.bin", "a/5.txt"):
        s3.put(name, b"x")
    assert store.glob(s3.url("a/*.bin")) == [s3.url("a/1.bin"), s3.url("a/2.bin")]
    assert store.glob(s3.url("**/*.bin")) == [
        s3.url(n) for n in ("a/1.bin", "a/2.bin", "a/x/3.bin", "b/4.bin")
    ]
    assert store.glob(s3.url("c/*")) == []


def test_a_missing_object_fails_at_once_naming_the_url(s3: S3Place, store: ObjectStore) -> None:
    url = s3.url("nothing-here.bin")
    for attempt in (lambda: store.size(parse(url)), lambda: store.read(parse(url))):
        with pytest.raises(
            FileNotFoundError, match=re.escape(f"`{url}` does not exist at http://127.0.0.1:")
        ):
            attempt()
    assert store.statistics().retries == 0


def test_a_missing_bucket_fails_at_once(store: ObjectStore) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape("`s3://no-such-bucket/key.bin` does not exist")):
        store.size(ObjectUrl("no-such-bucket", "key.bin"))
    assert store.statistics().retries == 0


@pytest.mark.parametrize(
    "credentials",
    [{"secret": "wrong-secret-1234567890"}, {"key": "AKNOBODYKNOWS"}, {"anon": True}],
    ids=["wrong-secret", "unknown-key", "anonymous"],
)
def test_bad_credentials_fail_at_once_naming_the_url(
    s3: S3Place, client: str, credentials: dict[str, object]
) -> None:
    url = s3.put("data.bin", DATA)
    store = open_store(s3, client, **credentials)
    try:
        with pytest.raises(
            PermissionError, match=re.escape(f"`{url}`: access denied by http://127.0.0.1:")
        ) as caught:
            store.fetch([(parse(url), 0, 10)])
        assert store.statistics().retries == 0
        for secret in (s3.server.credentials.secret_key, "wrong-secret-1234567890"):
            assert secret not in str(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__context__ is None
    finally:
        store.close()


def test_a_range_past_the_end_comes_back_short(s3: S3Place, client: str) -> None:
    store = open_store(s3, client)
    try:
        blob = open_blob(s3.put("data.bin", DATA), store)
        assert blob.size == len(DATA)
        assert blob.read(len(DATA) - 10, 100) == DATA[-10:]
        assert blob.read(len(DATA) + 10, 100) == b""
        assert read_spans([(blob, 0, 4), (blob, len(DATA), len(DATA) + 4)]) == [DATA[:4], b""]
    finally:
        store.close()


def test_an_object_that_shrank_since_it_was_opened_fails_at_once(s3: S3Place, client: str) -> None:
    store = open_store(s3, client)
    try:
        url = parse(s3.put("data.bin", DATA))
        store.size(url)
        s3.put("data.bin", DATA[:100])
        with pytest.raises(OSError, match=re.escape(f"`{url}`")):
            store.fetch([(url, 5000, 6000)])
        assert store.statistics().retries == 0
    finally:
        store.close()


@pytest.mark.parametrize("span", [(0, 8), (1000, 9000)])
def test_an_object_deleted_since_it_was_opened_fails_at_once_as_not_found(
    s3: S3Place, client: str, span: tuple[int, int]
) -> None:
    # pyarrow calls a small range of a deleted object INTERNAL_FAILURE (the 404's error
    # document does not fit its buffer), once retried five times as the server failing.
    store = open_store(s3, client, retries=3)
    try:
        url = parse(s3.put("gone.bin", DATA))
        store.size(url)
        s3.delete("gone.bin")
        with pytest.raises(FileNotFoundError, match=re.escape(f"`{url}` does not exist")):
            store.fetch([(url, *span)])
        assert store.statistics().retries == 0
    finally:
        store.close()


# Transient failures, through the fault proxy


@pytest.mark.parametrize(("status", "name"), [(503, "slow-down"), (500, "server-error"), (0, "reset")])
def test_transient_failures_are_retried(
    s3: S3Place, fault_proxy: FaultProxy, client: str, status: int, name: str
) -> None:
    url = parse(s3.put("data.bin", DATA))
    store = open_store(s3.through(fault_proxy), client, retries=3)
    try:
        store.size(url)
        fault_proxy.reset_counts()
        fault_proxy.fail(2, status)
        # Ranges longer than S3's error document: pyarrow reads the error into the range's
        # buffer, and asks again with HEAD when it does not fit (see the access-denied test).
        assert store.fetch([(url, 100, 1100)]) == [DATA[100:1100]]
        assert fault_proxy.requests == 3
        # A client may itself send a request again, once, when a kept-alive connection was
        # reset under it (curl does, under pyarrow): the store's retries did the rest.
        assert store.statistics().retries == 2 or (status == 0 and store.statistics().retries == 1)
    finally:
        store.close()


def test_retries_are_bounded_then_the_error_names_the_url(
    s3: S3Place, fault_proxy: FaultProxy, client: str
) -> None:
    url = parse(s3.put("data.bin", DATA))
    store = open_store(s3.through(fault_proxy), client, retries=2)
    try:
        store.size(url)
        fault_proxy.reset_counts()
        fault_proxy.fail(1000, 503)
        with pytest.raises(
            ConnectionError,
            match=re.escape(f"`{url}`: {fault_proxy.endpoint} did not answer after 3 attempts"),
        ):
            store.fetch([(url, 100, 1100)])
        assert fault_proxy.requests == 3
        assert store.statistics().failures == 1
    finally:
        store.close()


def test_access_denied_mid_run_fails_at_once(s3: S3Place, fault_proxy: FaultProxy, client: str) -> None:
    url = parse(s3.put("data.bin", DATA))
    store = open_store(s3.through(fault_proxy), client)
    try:
        store.size(url)
        fault_proxy.fail(1000, 403)  # as when a session token expires
        with pytest.raises(PermissionError, match=re.escape(f"`{url}`: access denied")):
            store.fetch([(url, 10, 20)])
        assert store.statistics().retries == 0
    finally:
        store.close()


def test_no_server_at_all_is_a_connection_error(s3: S3Place, client: str) -> None:
    from tools.seaweedfs import free_port

    place = S3Place(s3.server, s3.prefix, endpoint=f"http://127.0.0.1:{free_port()}")
    store = open_store(place, client, retries=1)
    try:
        with pytest.raises(ConnectionError, match="did not answer after 2 attempts"):
            store.size(parse(s3.url("x")))
    finally:
        store.close()


@repeated
def test_the_ranges_of_one_fetch_are_in_flight_together(
    s3: S3Place, fault_proxy: FaultProxy, client: str, repeat: int
) -> None:
    url = parse(s3.put("data.bin", DATA))
    store = open_store(s3.through(fault_proxy), client)
    try:
        store.size(url)
        fault_proxy.reset_counts()
        # Each answer held 1 s: long enough for threads started on a busy machine to join in.
        fault_proxy.delay = 1.0
        ranges = [(url, 512 * i, 512 * i + 100) for i in range(32)]  # apart: nothing to merge
        assert store.fetch(ranges) == [DATA[s:e] for _, s, e in ranges]
        assert fault_proxy.requests == 32
        # Sent one after another, at most one would be in flight at a time.
        assert fault_proxy.peak >= 8
        fault_proxy.reset_counts()
        assert store.fetch([(url, 0, 100), (url, 100, 300), (url, 300, 301)]) == [
            DATA[:100],
            DATA[100:300],
            DATA[300:301],
        ]
        assert fault_proxy.requests == 1  # touching ranges: one request
    finally:
        store.close()


def test_many_threads_fetch_from_one_store(s3: S3Place, store: ObjectStore) -> None:
    url = parse(s3.put("data.bin", DATA))
    failures: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(10):
                start = (seed * 997 + i * 131) % 16000
                ranges = [(url, start, start + 50), (url, start // 2, start // 2 + 300)]
                assert store.fetch(ranges) == [DATA[s:e] for _, s, e in ranges]
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_a_closed_store_refuses_and_its_threads_are_gone(s3: S3Place, client: str) -> None:
    store = open_store(s3, client)
    url = parse(s3.put("data.bin", DATA))
    store.fetch([(url, 0, 10), (url, 100, 110)])
    store.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.fetch([(url, 0, 10)])
    assert not [t for t in threading.enumerate() if t.name.startswith("aioloader-storage")]


# Blobs: local and remote alike


def test_local_and_remote_blobs_read_alike(s3: S3Place, tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "data.bin")
    with open(path, "wb") as file:
        file.write(DATA)
    store = ObjectStore(resolve(s3.options()))
    try:
        local, remote = LocalBlob(path), open_blob(s3.put("data.bin", DATA), store)
        assert isinstance(remote, RemoteBlob)
        spans = [(0, 10), (16380, 16400), (3, 3), (20000, 20010)]
        for blob in (local, remote):
            assert read_spans([(blob, s, e) for s, e in spans]) == [DATA[s:e] for s, e in spans]
            file = BlobFile(blob, {100: DATA[100:200]})
            file.seek(120)
            assert file.read(30) == DATA[120:150]
            assert file.fallback_reads == 0
            assert file.read(100) == DATA[150:250]
            assert file.fallback_reads == 1
            assert file.seek(-6, os.SEEK_END) == len(DATA) - 6
            assert file.read() == DATA[-6:]
            blob.close()
            with pytest.raises(ValueError, match="was closed"):
                read_spans([(blob, 0, 1)])
    finally:
        store.close()

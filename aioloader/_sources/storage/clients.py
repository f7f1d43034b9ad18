"""The client libraries that talk to an S3 store, each behind the same four calls.

Measured here against SeaweedFS on loopback (see benchmarks/storage_bench.py
and the README): for small range reads many at once, `obstore` (Rust) costs
the least CPU per request on the GIL build; `pyarrow.fs.S3FileSystem` (C++)
is close, and it is the one fast client with free-threaded wheels;
`s3fs` (pure Python, aiobotocore) costs 5-10 times more per request, and
more still with the GIL off. So `client="auto"` takes the first of
obstore, pyarrow, s3fs that imports: obstore on the GIL build with the
`s3-fast` extra, pyarrow on free-threaded builds.

Every adapter sends each request once (the library's own retries are off:
`ObjectStore` retries, the same way for all), is safe to call from many
threads at once, and sorts its library's errors into `Kind`s.
"""

from __future__ import annotations

import importlib.util
import threading
from datetime import timedelta
from typing import Any, Protocol

from aioloader._sources.storage.errors import Kind, classify_message
from aioloader._sources.storage.settings import S3Settings
from aioloader._sources.storage.urls import ObjectUrl

CONNECT_TIMEOUT = 10.0  # seconds
REQUEST_TIMEOUT = 60.0


class Client(Protocol):
    """One library's way to the store. Thread-safe; each call is one request."""

    name: str

    def size(self, url: ObjectUrl) -> int: ...

    def read_range(self, url: ObjectUrl, start: int, end: int) -> bytes: ...

    def read(self, url: ObjectUrl) -> bytes: ...

    def list(self, bucket: str, prefix: str) -> list[str]: ...

    def classify(self, error: BaseException) -> Kind: ...


def make_client(settings: S3Settings) -> Client:
    """The client `settings.client` names, or for `auto` the first of obstore, pyarrow, s3fs installed."""
    names = _ADAPTERS if settings.client == "auto" else (settings.client,)
    for name in names:
        if _installed(name):
            return _ADAPTERS[name](settings)
    if settings.client != "auto":
        raise ModuleNotFoundError(
            f"`storage_options['client']` is {settings.client!r}, which is not installed here."
        )
    raise ModuleNotFoundError(
        "reading s3:// URLs needs obstore, pyarrow or s3fs: pip install 'aioloader[s3]' "
        "(or 'aioloader[s3-fast]' on GIL builds)."
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:
        return False


class ObstoreClient:
    """obstore: one `S3Store` per bucket, made at first use."""

    name = "obstore"

    def __init__(self, settings: S3Settings) -> None:
        import obstore

        self._obstore, self._settings = obstore, settings
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _store(self, bucket: str) -> Any:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._make_store(bucket)
            return store

    def _make_store(self, bucket: str) -> Any:
        from obstore.store import S3Store

        s = self._settings
        credentials: dict[str, Any] = (
            {"skip_signature": True}
            if s.anon
            else {"access_key_id": s.key, "secret_access_key": s.secret, "token": s.token}
        )
        options: Any = {
            "allow_http": bool(s.endpoint_url and s.endpoint_url.startswith("http://")),
            "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT),
            "timeout": timedelta(seconds=REQUEST_TIMEOUT),
        }
        return S3Store(
            bucket,
            endpoint=s.endpoint_url,
            region=s.region,
            virtual_hosted_style_request=s.endpoint_url is None,
            client_options=options,
            retry_config={"max_retries": 0},
            **{k: v for k, v in credentials.items() if v is not None},
        )

    def size(self, url: ObjectUrl) -> int:
        return int(self._obstore.head(self._store(url.bucket), url.key)["size"])

    def read_range(self, url: ObjectUrl, start: int, end: int) -> bytes:
        return bytes(self._obstore.get_range(self._store(url.bucket), url.key, start=start, end=end))

    def read(self, url: ObjectUrl) -> bytes:
        return bytes(self._obstore.get(self._store(url.bucket), url.key).bytes())

    def list(self, bucket: str, prefix: str) -> list[str]:
        pages = self._obstore.list(self._store(bucket), prefix or None)
        return [str(item["path"]) for page in pages for item in page]

    def classify(self, error: BaseException) -> Kind:
        from obstore import exceptions

        if isinstance(error, exceptions.PermissionDeniedError | exceptions.UnauthenticatedError):
            return Kind.DENIED
        return classify_message(error)


class PyarrowClient:
    """pyarrow's `S3FileSystem`, with one input file kept per object (`read_at` is thread-safe)."""

    name = "pyarrow"

    def __init__(self, settings: S3Settings) -> None:
        from pyarrow import fs

        self._fs = fs.S3FileSystem(
            access_key=settings.key,
            secret_key=settings.secret,
            session_token=settings.token,
            anonymous=settings.anon,
            region=settings.region,
            endpoint_override=settings.endpoint_url,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1),
        )
        self._selector = fs.FileSelector
        self._not_found = fs.FileType.NotFound
        self._files: dict[ObjectUrl, Any] = {}
        self._lock = threading.Lock()

    def _file(self, url: ObjectUrl) -> Any:
        with self._lock:
            file = self._files.get(url)
        if file is None:  # opening asks for the size (a HEAD request): outside the lock
            file = self._fs.open_input_file(f"{url.bucket}/{url.key}")
            with self._lock:
                file = self._files.setdefault(url, file)
        return file

    def size(self, url: ObjectUrl) -> int:
        return int(self._file(url).size())

    def read_range(self, url: ObjectUrl, start: int, end: int) -> bytes:
        try:
            return bytes(self._file(url).read_at(end - start, start))
        except OSError as error:
            # pyarrow writes a ranged GET's answer into a buffer the size of the range: an error
            # document that does not fit (403 on a small range) is reported as INTERNAL_FAILURE.
            # A HEAD request says what it was: it raises for a 403, and answers NotFound for an
            # object deleted since it was opened (which pyarrow's ranged GET calls a failure).
            if "Failed to flush response stream" in str(error):
                path = f"{url.bucket}/{url.key}"
                if self._fs.get_file_info(path).type == self._not_found:
                    raise FileNotFoundError(f"{path}: no such object (HEAD after: {error})") from error
            raise

    def read(self, url: ObjectUrl) -> bytes:
        with self._fs.open_input_stream(f"{url.bucket}/{url.key}") as stream:
            return bytes(stream.read())

    def list(self, bucket: str, prefix: str) -> list[str]:
        selector = self._selector(f"{bucket}/{prefix}".rstrip("/"), recursive=True, allow_not_found=True)
        skip = len(bucket) + 1
        return [info.path[skip:] for info in self._fs.get_file_info(selector) if info.is_file]

    def classify(self, error: BaseException) -> Kind:
        return classify_message(error)


class S3fsClient:
    """s3fs (aiobotocore): its sync calls, run on fsspec's event-loop thread."""

    name = "s3fs"

    def __init__(self, settings: S3Settings) -> None:
        import s3fs  # type: ignore[import-untyped]

        config = {
            "s3": {"addressing_style": "path" if settings.endpoint_url else "auto"},
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "connect_timeout": CONNECT_TIMEOUT,
            "read_timeout": REQUEST_TIMEOUT,
        }
        self._fs = s3fs.S3FileSystem(
            key=settings.key,
            secret=settings.secret,
            token=settings.token,
            anon=settings.anon,
            endpoint_url=settings.endpoint_url,
            client_kwargs={"region_name": settings.region},
            config_kwargs=config,
            skip_instance_cache=True,
            use_listings_cache=False,
        )
        self._fs.retries = 1  # s3fs's own retry loop: one attempt

    def size(self, url: ObjectUrl) -> int:
        return int(self._fs.size(f"{url.bucket}/{url.key}"))

    def read_range(self, url: ObjectUrl, start: int, end: int) -> bytes:
        return bytes(self._fs.cat_file(f"{url.bucket}/{url.key}", start=start, end=end))

    def read(self, url: ObjectUrl) -> bytes:
        return bytes(self._fs.cat_file(f"{url.bucket}/{url.key}"))

    def list(self, bucket: str, prefix: str) -> list[str]:
        skip = len(bucket) + 1
        return [path[skip:] for path in self._fs.find(f"{bucket}/{prefix}")]

    def classify(self, error: BaseException) -> Kind:
        return classify_message(error)


_ADAPTERS: dict[str, type[ObstoreClient] | type[PyarrowClient] | type[S3fsClient]] = {
    "obstore": ObstoreClient,
    "pyarrow": PyarrowClient,
    "s3fs": S3fsClient,
}

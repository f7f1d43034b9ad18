"""The toolchain (tools/): which free-threaded CPython it builds, and what it says on the way.

Debian's archive is replaced by a stand-in `apt-get` on PATH that answers as
the real one does here today (checked by hand: `python3.14` is listed in
forky's index but its files answer 404, in about 2 s; `python3.13` downloads).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tools import envs, interpreters

REPO = Path(__file__).resolve().parent.parent

FAKE_APT = """#!/bin/sh
# A stand-in for apt-get: `update` works, `source` serves only $SERVED, `install` fails.
for last; do :; done
case "$*" in
  *" update") exit 0 ;;
  *"source --download-only"*)
    if [ "$last" = "$SERVED" ]; then touch "${last}_9.9.orig.tar.xz"; exit 0; fi
    echo "Err:1 http://deb.example/debian/pool/main/p/$last/${last}_9.9-1.dsc" >&2
    echo "  404  Not Found [IP: 192.0.2.1 80]" >&2
    echo "E: Failed to fetch http://deb.example/$last.dsc  404  Not Found" >&2
    echo "E: Failed to fetch some archives." >&2
    exit 100 ;;
  *install*) echo "E: Unable to locate package libzstd-dev" >&2; exit 100 ;;
esac
exit 1
"""


@pytest.fixture
def fake_apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    apt = bin_dir / "apt-get"
    apt.write_text(FAKE_APT)
    apt.chmod(apt.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(interpreters, "debian_archive_uri", lambda: "http://deb.example/debian")
    return tmp_path


def lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def download(fake_apt: Path, monkeypatch: pytest.MonkeyPatch, served: str) -> tuple[tuple[int, int], Path]:
    """`_download_debian_source` from an archive that serves only the package `served`."""
    monkeypatch.setenv("SERVED", served)
    work = fake_apt / "work"
    work.mkdir()
    return interpreters._download_debian_source(work)


def test_314_is_tried_first_and_its_404_costs_one_line(
    fake_apt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    version, tarball = download(fake_apt, monkeypatch, "python3.13")
    assert (version, tarball.name) == ((3, 13), "python3.13_9.9.orig.tar.xz")
    said = lines(capsys)
    about_314 = [line for line in said if "python3.14" in line]
    assert about_314 == [
        "[dev] Debian's python3.14 source package is not available here (404 Not Found); trying the next one"
    ]
    assert not any("Err:" in line or "E: " in line for line in said), said


def test_314_is_built_when_the_archive_serves_it(
    fake_apt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert download(fake_apt, monkeypatch, "python3.14")[0] == (3, 14)
    assert not any("not available" in line for line in lines(capsys))


def test_no_source_package_at_all_is_a_clear_error(
    fake_apt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(interpreters.ToolchainError, match=r"serves none of python3\.14, python3\.13"):
        download(fake_apt, monkeypatch, "none")


def test_a_missing_libzstd_dev_is_said_clearly(
    fake_apt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(interpreters, "ZSTD_HEADER", fake_apt / "no" / "zstd.h")
    interpreters._ensure_zstd_headers()
    said = lines(capsys)
    assert said[-1].startswith("[dev] MISSING libzstd-dev: `apt-get -q -y install libzstd-dev` failed")
    assert "without compression.zstd" in said[-1]


def test_present_zstd_headers_install_nothing(
    fake_apt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    header = fake_apt / "zstd.h"
    header.touch()
    monkeypatch.setattr(interpreters, "ZSTD_HEADER", header)
    interpreters._ensure_zstd_headers()
    assert lines(capsys) == []


@pytest.mark.parametrize(("python", "with_orbax"), [("3.13", False), ("3.14", True)])
def test_the_free_threaded_extra_adds_orbax_from_314(python: str, with_orbax: bool) -> None:
    """What the ft environment (and a free-threaded user) installs: orbax needs tensorstore,
    which has free-threaded wheels for 3.14t and none for 3.13t."""
    requirements = [Requirement(r) for r in envs.requirements(REPO / "pyproject.toml", ("free-threaded",))]
    wanted = {
        r.name for r in requirements if r.marker is None or r.marker.evaluate({"python_version": python})
    }
    assert {"jax", "pyarrow", "s3fs"} <= wanted
    assert ("orbax-checkpoint" in wanted) is with_orbax
    assert "array-record" not in wanted  # no free-threaded wheels: the built-in reader instead


def collected(*args: str) -> tuple[int, list[str]]:
    """The exit code and the test ids of `pytest --collect-only` on this file with `args`."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", __file__]
    done = subprocess.run(
        [*command, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    return done.returncode, ids if done.returncode == 0 else [done.stdout + done.stderr]


def test_the_shards_of_a_session_split_its_tests_between_them() -> None:
    """`./dev test` runs each build's session as `--shard 1/2` and `--shard 2/2` at once:
    together they must run every selected test exactly once."""
    code, everything = collected("-k", "not shards")
    code_1, first = collected("-k", "not shards", "--shard=1/2")
    code_2, second = collected("-k", "not shards", "--shard", "2/2")
    assert (code, code_1, code_2) == (0, 0, 0)
    assert first
    assert second
    assert sorted(first + second) == sorted(everything)
    assert abs(len(first) - len(second)) <= 1  # interleaved, so about the same size


@pytest.mark.parametrize("shard", ["3/2", "0/2", "1/0", "half", "1/2/3"])
def test_a_bad_shard_is_refused_by_name(shard: str) -> None:
    code, output = collected(f"--shard={shard}")
    assert code == pytest.ExitCode.USAGE_ERROR
    assert "--shard: " in output[0]
    assert repr(shard) in output[0]

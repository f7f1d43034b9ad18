"""The README's Install section works: the wheel builds, installs into a fresh venv and runs a
loader there, and every extra the section names exists.

Kept quick and offline: the wheel is built with the hatchling of this
environment (`--no-build-isolation`), installed with `--no-deps`, and the new
venv sees this environment's site-packages (numpy, ...) through a `.pth` file;
this environment holds no aioloader (tests run the checkout through
PYTHONPATH), so the one the venv imports is the wheel's.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.test_highwayhash import has_compiler

REPO = Path(__file__).resolve().parent.parent

TINY_LOADER = """
import json, aioloader as al
loader = al.DataLoader(
    data_source=al.RangeDataSource(0, 100),
    sampler=al.IndexSampler(100, shuffle=True, num_epochs=1, seed=3),
    operations=[al.Batch(10)],
    worker_count=2,
)
print(json.dumps({"file": al.__file__, "batches": [b.tolist() for b in loader]}))
"""

# The hashes of the Riegeli signature that starts every ArrayRecord file: its block
# header's, its chunk header's and its (empty) data's.
HASH_SIGNATURE = """
import struct
from aioloader._sources.arrayrecord import highwayhash
from aioloader._sources.arrayrecord.riegeli import FILE_SIGNATURE as s
hashed = [s[8:24], s[32:64], b""]
stored = [struct.unpack_from("<Q", s, at)[0] for at in (0, 24, 40)]
print(highwayhash.implementation(), highwayhash.hash64_many(hashed) == stored)
"""


def install_section() -> str:
    readme = (REPO / "README.md").read_text()
    found = re.search(r"^## Install\n(.*?)(?=^## )", readme, flags=re.MULTILINE | re.DOTALL)
    assert found, "README.md has no `## Install` section"
    return found.group(1)


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True, cwd=cwd, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, REPO)
    (found,) = dist.glob("aioloader-*.whl")
    return found


def test_the_install_section_comes_first() -> None:
    readme = (REPO / "README.md").read_text()
    assert re.findall(r"^## .*", readme, flags=re.MULTILINE)[0] == "## Install"


def test_every_extra_the_readme_names_is_in_the_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
        assert "aioloader/py.typed" in archive.namelist()
        # Compiled on first use (see `native`): the C source ships, no binary does.
        assert "aioloader/_sources/arrayrecord/highwayhash.c" in archive.namelist()
        assert not [n for n in archive.namelist() if n.endswith((".so", ".dll", ".dylib"))]
    extras = set(metadata.get_all("Provides-Extra") or [])
    named = {
        e.strip()
        for group in re.findall(r"aioloader\[([^\]]+)\]", install_section())
        for e in group.split(",")
    }
    assert {"jax", "parquet", "arrayrecord", "orbax", "s3", "free-threaded"} <= named
    assert named <= extras, f"the README names extras the wheel lacks: {named - extras}"


def test_the_wheel_runs_a_loader_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel)
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = json.loads(run(python, "-c", TINY_LOADER, cwd=tmp_path, env=env))  # not the checkout
    assert Path(result["file"]).is_relative_to(venv), result["file"]
    batches = result["batches"]
    assert [len(b) for b in batches] == [10] * 10
    assert sorted(x for b in batches for x in b) == list(range(100))
    assert batches[0] != list(range(10))  # shuffled
    # The wheel's C source builds into the cache folder, and its hashes verify a real file's.
    hashed = run(python, "-c", HASH_SIGNATURE, cwd=tmp_path, env={**env, "AIOLOADER_CACHE": str(tmp_path)})
    compiled = has_compiler()
    assert hashed.split() == ["C" if compiled else "NumPy", "True"]
    assert len(list((tmp_path / "native").glob("highwayhash-*.so"))) == int(compiled)

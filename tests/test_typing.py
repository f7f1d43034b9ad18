"""Types flow through `MapDataset`: mypy, run on tests/typed/map_dataset_types.py, reveals the
type that each `reveal_type` line names in its comment, and reports the errors marked there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "tests" / "typed" / "map_dataset_types.py"
CACHE = ["--cache-dir", str(REPO / ".mypy_cache" / "typing-test")]


def expected_messages() -> dict[int, str]:
    """Line -> what mypy must say there: the revealed type, or the start of an error."""
    expected = {}
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), 1):
        if line.lstrip().startswith("reveal_type("):
            expected[number] = "note: " + line.split("# ", 1)[1]
        elif "# error: " in line:
            expected[number] = "error: " + line.split("# error: ", 1)[1]
    return expected


def mypy_messages(output: str) -> dict[int, str]:
    """Line -> what mypy said there, in the form of `expected_messages`."""
    messages = {}
    for line in output.splitlines():
        found = re.match(rf"{re.escape(str(EXAMPLE))}:(\d+): (note|error): (.*)", line)
        if found:
            number, kind, text = int(found[1]), found[2], found[3]
            revealed = re.fullmatch(r'Revealed type is "(.*)"', text)
            messages[number] = f"note: {revealed[1]}" if revealed else f"{kind}: {text}"
    return messages


@pytest.mark.skipif(
    "AIOLOADER_GIL_PYTHON" in os.environ,
    reason="a static check, the same on every build: it runs in the GIL session",
)
def test_mypy_reveals_the_types_the_example_names() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        # A cache of its own: mypy replays the messages of a module from its cache as they
        # were written, relative paths included, after a run with other arguments.
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-absolute-path", *CACHE, str(EXAMPLE)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    said, expected = mypy_messages(result.stdout), expected_messages()
    assert len(expected) >= 18
    assert said.keys() == expected.keys(), result.stdout + result.stderr
    for number, message in expected.items():
        if message.startswith("note: "):
            assert said[number] == message, number
        else:
            assert said[number].startswith(message), (number, said[number], message)

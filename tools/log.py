"""One way for the tooling to tell the user what it is doing."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    """Print a progress line on stderr, marked as coming from the tooling."""
    print(f"[dev] {message}", file=sys.stderr, flush=True)

"""Who started which thread: `Thread.start` waits until the new thread runs, so the
loader's threads start one another rather than all from one thread (tests check it)."""

from __future__ import annotations

import threading

import pytest


def note_thread_starts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(starting thread's name, started thread's name) for every `Thread.start` from now on."""
    starts: list[tuple[str, str]] = []
    start = threading.Thread.start

    def noted(thread: threading.Thread) -> None:
        starts.append((threading.current_thread().name, thread.name))
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", noted)
    return starts

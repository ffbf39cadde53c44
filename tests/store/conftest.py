"""Fixtures for the store tests: a store in ``tmp_path`` with an injected clock."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from store import Event, Store

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000_000_000
SEC = 1_000_000_000


class FakeClock:
    """A settable clock in nanoseconds; the engine never reads real time in these tests."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> int:
        self.now += ns
        return self.now


class Events:
    """Collects events from the writer thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[Event] = []

    def __call__(self, events: Sequence[Event]) -> None:
        with self._lock:
            self.items.extend(events)

    def take(self) -> list[Event]:
        with self._lock:
            out, self.items = self.items, []
        return out


def start_child(*args: str, stdin: bool = False, stderr: bool = True) -> subprocess.Popen[str]:
    """A Python child process (``-m module ...`` or ``-c code ...``) run from the repository
    root with our packages importable; text pipes for stdout (and stdin / stderr)."""
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr else None,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock, events: Events) -> Iterator[Store]:
    s = Store.open(tmp_path / "db", clock=clock, on_event=events, map_size=1 << 24)
    try:
        yield s
    finally:
        s.close()

"""The base of the stateful Hypothesis tests of the store: one store in a directory of its
own per run, an injected clock, the events it emits, and a reopen step."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Literal

from hypothesis.stateful import RuleBasedStateMachine, rule

from store import Store
from store.engine import REMOVE_SLICE
from tests.store.conftest import Events, FakeClock


class StoreMachine(RuleBasedStateMachine):
    root: Path  # set by the pytest test to its tmp_path
    remove_slice = REMOVE_SLICE
    sync: Literal["always", "batch"] = "batch"
    _n = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.dir = self.root / f"run{next(self._n)}"
        self.clock = FakeClock()
        self.events = Events()
        self.store = self._open()

    def _open(self) -> Store:
        return Store.open(
            self.dir,
            clock=self.clock,
            on_event=self.events,
            map_size=1 << 22,
            sync=self.sync,
            remove_slice=self.remove_slice,
        )

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def tick_while_due(self) -> None:
        """Tick whenever the store says something is due, as the broker's loop does."""
        for _ in range(10_000):
            due = self.store.next_deadline()
            if due is None or due > self.clock.now:
                return
            self.store.tick(self.clock.now).result(timeout=30)
        raise AssertionError("always due")

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self._open()

"""Where an incremental roll-up stands between runs, kept beside its output.

``DIR/_rollup/`` (Spark's readers skip names starting with ``_``, so ``spark.read.parquet
(DIR)`` sees only the windows):

- ``state.json``: the stream (name and id), window, schema, the last sequence rolled up
  (``offset``), the generation ``gen`` of the partial aggregates and ``published``, the
  generation whose windows are the Parquet files at the top of ``DIR``; written to a
  temporary file and renamed, so a run killed at any point leaves the previous state;
- ``partials-<gen>/``: per topic and window the parts an aggregate is merged from
  (``messages``, ``corrupt``, ``<f>_n``, ``<f>_sum``, ``<f>_min``, ``<f>_max``);
- ``out/``: the windows of the next generation while they are written, before their files
  replace the ones at the top of ``DIR``;
- ``lock``: ``flock``-ed for the whole run, so two runs on one ``DIR`` cannot interleave.

A run that dies after writing ``state.json`` but before the swap leaves ``published <
gen``; the next run publishes ``gen`` first. Old generations are removed once the next one is
published.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Final

VERSION: Final = 1


class StateError(ValueError):
    """``DIR`` holds a roll-up this run cannot continue (another stream, window or schema)."""


@dataclass(frozen=True)
class RollupState:
    stream: str
    sid: int
    window: str
    schema: str
    offset: int = 0  # last sequence rolled up
    gen: int = 0  # 0: nothing rolled up yet
    published: int = 0

    def advance(self, offset: int) -> RollupState:
        return replace(self, offset=offset, gen=self.gen + 1)


class StateDir:
    """The ``_rollup`` directory of one output directory."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.root = os.path.join(out, "_rollup")

    @property
    def staging(self) -> str:
        return os.path.join(self.root, "out")

    def partials(self, gen: int) -> str:
        return os.path.join(self.root, f"partials-{gen}")

    def corrupt(self, gen: int) -> str:
        return os.path.join(self.out, "_corrupt", f"gen={gen}")

    @contextmanager
    def locked(self) -> Iterator[None]:
        os.makedirs(self.root, exist_ok=True)
        fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StateError(
                    f"another roll-up run is using {self.out!r}; wait for it to finish"
                ) from None
            yield
        finally:
            os.close(fd)

    def load(self) -> RollupState | None:
        try:
            with open(os.path.join(self.root, "state.json"), encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise StateError(
                f"{self.root}/state.json is damaged ({exc}); run again with --rebuild"
            ) from None
        if not isinstance(data, dict) or data.pop("version", None) != VERSION:
            raise StateError(f"{self.root}/state.json has an unknown format; use --rebuild")
        try:
            return RollupState(**data)
        except TypeError:
            raise StateError(
                f"{self.root}/state.json has an unknown format; use --rebuild"
            ) from None

    def save(self, state: RollupState) -> None:
        tmp = os.path.join(self.root, "state.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": VERSION, **asdict(state)}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.root, "state.json"))

    def reset(self) -> None:
        """Forget every earlier run: state, partials, windows and corrupt records."""
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(os.path.join(self.out, "_corrupt"), ignore_errors=True)
        self._remove_windows()
        os.makedirs(self.root, exist_ok=True)

    def swap_in_staging(self) -> None:
        """Replace the window files at the top of ``DIR`` with those in ``staging``."""
        self._remove_windows()
        for name in os.listdir(self.staging):
            if name.startswith("_"):  # _SUCCESS
                continue
            os.replace(os.path.join(self.staging, name), os.path.join(self.out, name))
        shutil.rmtree(self.staging, ignore_errors=True)

    def drop_partials_except(self, gen: int) -> None:
        keep = f"partials-{gen}"
        for name in os.listdir(self.root):
            if name.startswith("partials-") and name != keep:
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def _remove_windows(self) -> None:
        if not os.path.isdir(self.out):
            return
        for name in os.listdir(self.out):
            path = os.path.join(self.out, name)
            if name.startswith("_") or not os.path.isfile(path):
                continue
            if name.startswith(("part-", ".part-")) or name.endswith(".parquet"):
                os.remove(path)

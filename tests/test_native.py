"""The compiled hot path (hotpath/, scripts/build_native.py): a current build is
used, ``JETMQ_NATIVE=0`` and a stale build are not, and the broker says which it runs.

Each case imports in a new interpreter (the decision is made once per process, when
``broker`` is first imported). The cases that need a build skip without one: the full
``./scripts/test`` always builds first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hotpath

REPO = Path(__file__).resolve().parents[1]
PROBE = (
    "import hotpath as n, broker.mqtt.decoder as d, broker.net.output as o, store.streams as s; "
    "print(n.state()); print(d.__file__); print(o.__file__); print(s.__file__); "
    "print(n.usable_or_absent())"
)
needs_build = pytest.mark.skipif(
    hotpath.build_state() != "compiled",
    reason="no current build of the hot path (scripts/build_native.py)",
)


def _copy_built_tree(dest: Path) -> None:
    """The packages with compiled modules, with their build if any (not their caches)."""
    for package in ("broker", "store", "hotpath"):
        shutil.copytree(
            REPO / package, dest / package, ignore=shutil.ignore_patterns("__pycache__")
        )


def _probe(root: Path, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != hotpath.ENV}
    environ.update(env, PYTHONPATH=str(root))
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=root,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_every_listed_module_has_its_source() -> None:
    for module in hotpath.MODULES:
        assert hotpath.source_path(module).is_file(), module


@pytest.mark.timeout(120)
def test_jetmq_native_0_runs_the_sources() -> None:
    state, decoder, output, streams, usable = _probe(REPO, JETMQ_NATIVE="0")
    assert state == "interpreted (JETMQ_NATIVE=0)"
    assert usable == "True"  # by choice: jetmq serve logs it at info
    assert decoder.endswith("broker/mqtt/decoder.py")
    assert output.endswith("broker/net/output.py")
    assert streams.endswith("store/streams.py")


@needs_build
@pytest.mark.timeout(120)
def test_a_current_build_is_used() -> None:
    state, decoder, output, streams, usable = _probe(REPO)
    assert state == "compiled"
    assert usable == "True"
    assert decoder.endswith(".so")
    assert output.endswith(".so")
    assert streams.endswith(".so")


@needs_build
@pytest.mark.timeout(120)
def test_an_edited_module_is_never_shadowed_by_the_old_build(tmp_path: Path) -> None:
    """A copy of the built tree with one compiled module edited: every listed module then
    loads from its source (they call each other natively: all or none)."""
    _copy_built_tree(tmp_path)
    assert _probe(tmp_path)[0] == "compiled"  # the copy's build is current as copied
    edited = tmp_path / "broker" / "net" / "output.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    state, decoder, output, streams, usable = _probe(tmp_path)
    assert state == "interpreted (sources changed since the build: scripts/build_native.py)"
    assert usable == "False"  # jetmq serve warns
    assert decoder == str(tmp_path / "broker" / "mqtt" / "decoder.py")
    assert output == str(edited)
    assert streams == str(tmp_path / "store" / "streams.py")


@needs_build
@pytest.mark.timeout(120)
def test_a_build_missing_a_module_is_not_used(tmp_path: Path) -> None:
    _copy_built_tree(tmp_path)
    for lib in (tmp_path / "hotpath").glob("lib__mypyc.*.so"):
        lib.unlink()
    state, decoder, _, _, usable = _probe(tmp_path)
    assert state == "interpreted (build incomplete: scripts/build_native.py)"
    assert decoder.endswith("decoder.py")
    assert usable == "False"


@needs_build
@pytest.mark.timeout(120)
def test_an_instrumented_build_runs_only_for_the_training(tmp_path: Path) -> None:
    """The profile-guided build's first step stamps its build "instrumented": a build
    interrupted after it leaves that behind, and only the training run (JETMQ_TRAINING=1)
    may use it; anything else runs interpreted, and jetmq serve warns."""
    _copy_built_tree(tmp_path)
    stamp = tmp_path / "hotpath" / hotpath.STAMP.name
    stamp.write_text(f"{hotpath.source_digest()} {hotpath.INSTRUMENTED}\n")
    state, decoder, _, _, usable = _probe(tmp_path)
    assert state == (
        "interpreted (an instrumented build, left by an interrupted build: scripts/build_native.py)"
    )
    assert decoder.endswith("decoder.py")
    assert usable == "False"
    state, decoder, _, _, _ = _probe(tmp_path, **{hotpath.TRAINING_ENV: "1"})
    assert state == "compiled"
    assert decoder.endswith(".so")


@pytest.mark.timeout(120)
def test_a_tree_without_a_build_runs_interpreted_as_it_is(tmp_path: Path) -> None:
    """As a wheel installs it (no mypyc build): interpreted, logged at info, not warned."""
    _copy_built_tree(tmp_path)  # whether there is a build or not
    for lib in tmp_path.glob("*/**/*.so"):
        lib.unlink()
    state, decoder, output, streams, usable = _probe(tmp_path)
    assert state == hotpath.NOT_BUILT
    assert (decoder, output, streams) == (
        str(tmp_path / "broker" / "mqtt" / "decoder.py"),
        str(tmp_path / "broker" / "net" / "output.py"),
        str(tmp_path / "store" / "streams.py"),
    )
    assert usable == "True"

"""The hot path compiled to C with mypyc, and the guard that keeps a stale build out
(standard library only: ``broker/__init__.py`` and ``store/__init__.py`` run it before any
other module of theirs).

The modules in :data:`MODULES` run per message, per connect and per wake-up: the broker's
codec, core, network and persistence client, and the store writer's per-operation work.
Their source stays the one truth. ``scripts/build_native.py`` compiles them in place (an
extension module next to each ``.py``, which Python's import system prefers, plus the
group's shared library ``hotpath/lib__mypyc*.so``), ``setup.py`` into a wheel; both write
:data:`STAMP`, the digest of the sources compiled (``build.py`` makes the extensions).
Compiled modules call each other natively, so the build is used whole or not at all:
unless the stamp matches the sources now, and ``JETMQ_NATIVE`` is not ``0``,
:func:`guard` puts a finder first in ``sys.meta_path`` that loads every one of them from
its ``.py``. An edited module is never shadowed by an old build; it runs interpreted
until the next build. :func:`state` says which it is (``jetmq serve`` logs it).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES = (
    "broker.mqtt.aliases",
    "broker.mqtt.connect_decoder",
    "broker.mqtt.connection",
    "broker.mqtt.decoder",
    "broker.mqtt.encoder",
    "broker.mqtt.session",
    "broker.mqtt.wire",
    "broker.core.hub",
    "broker.core.message",
    "broker.core.queues",
    "broker.core.router",
    "broker.core.sessions",
    "broker.core.stats",
    "broker.persist.client",
    "broker.persist.state",
    "broker.net.connection",
    "broker.net.handshake",
    "broker.net.idlewait",
    "broker.net.inbound",
    "broker.net.output",
    "broker.net.parking",
    "broker.net.runtime",
    "broker.net.settings",
    "broker.net.runs",
    "broker.net.transport",
    "store.catalog",
    "store.ctx",
    "store.engine",
    "store.keys",
    "store.rundelete",
    "store.streams",
    "store.subjrecs",
)
"""Compiled when built. Sources must pass mypyc (no class-level aliases of methods, no
``__class__`` assignment to their own classes) and keep their declared types at run time:
mypyc checks them."""

GROUP = "hotpath.lib"  # mypyc's group: its shared library is hotpath/lib__mypyc*.so
ROOT = Path(__file__).resolve().parent.parent
STAMP = Path(__file__).with_name("native.stamp")  # written by the build; not in git
ENV = "JETMQ_NATIVE"  # "0": run interpreted even when the build is current
# A profile-guided build's instrumented step stamps its build so (after the digest); only
# the training run, which sets TRAINING_ENV to "1", uses it. An interrupted build can
# leave it behind: nothing else ever runs it.
INSTRUMENTED = "instrumented"
TRAINING_ENV = "JETMQ_TRAINING"


def source_path(module: str) -> Path:
    """Where ``module``'s ``.py`` is (its extension module goes beside it)."""
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_digest() -> str:
    """The digest of the group's name and every compiled module's name and source."""
    digest = hashlib.sha256(GROUP.encode() + b"\0")
    for module in MODULES:
        digest.update(module.encode() + b"\0")
        digest.update(source_path(module).read_bytes())
    return digest.hexdigest()


def built(module: str) -> bool:
    """An extension module of ``module`` is next to its source."""
    path = source_path(module)
    return any(
        path.with_suffix(suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


_state: str | None = None


def state() -> str:
    """``"compiled"``, or ``"interpreted (<why>)"``: set by :func:`guard`."""
    return _state if _state is not None else _decide()


NOT_BUILT = "interpreted (not built: scripts/build_native.py)"  # a wheel's install, say
BY_CHOICE = f"interpreted ({ENV}=0)"


def usable_or_absent() -> bool:
    """The state is one to take as it is: compiled, interpreted by choice (the variable),
    or with no build at all. Otherwise a build is there but stale or incomplete, which
    ``jetmq serve`` warns of."""
    return state() in ("compiled", NOT_BUILT, BY_CHOICE)


def build_state() -> str:
    """``"compiled"`` when the build is there and current, else why not (the environment
    variable aside)."""
    parts = [built(module) for module in (*MODULES, GROUP + "__mypyc")]
    if not any(parts):
        return NOT_BUILT
    if not all(parts):
        return "interpreted (build incomplete: scripts/build_native.py)"
    try:
        stamp = STAMP.read_text().strip()
    except OSError:
        return "interpreted (no build stamp: scripts/build_native.py)"
    digest, _, kind = stamp.partition(" ")
    if digest != source_digest():
        return "interpreted (sources changed since the build: scripts/build_native.py)"
    if kind and not (kind == INSTRUMENTED and os.environ.get(TRAINING_ENV) == "1"):
        return "interpreted (an instrumented build, left by an interrupted build: scripts/build_native.py)"
    return "compiled"


def _decide() -> str:
    if os.environ.get(ENV, "") == "0":
        return BY_CHOICE
    return build_state()


class _SourceFirst:
    """A meta path finder of the listed modules' ``.py`` files, ahead of the extension
    modules beside them."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path or ():
            candidate = os.path.join(entry, leaf)
            if os.path.isfile(candidate):
                import importlib.util  # only when interpreted: the fast start stays fast

                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def guard() -> None:
    """Decide once per process; unless the build is current, load the sources."""
    global _state
    if _state is not None:
        return
    _state = _decide()
    if _state != "compiled":
        sys.meta_path.insert(0, _SourceFirst(frozenset(MODULES)))

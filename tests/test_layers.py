"""The import rules of ARCHITECTURE.md §2, checked in a fresh interpreter per layer.

Each check imports every module of a layer (walking the package) and then looks
at ``sys.modules``: a layer passes only if nothing outside its allowance was
loaded, directly or transitively.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

_PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    before = set(sys.modules)
    pkg = importlib.import_module(PKG)
    for info in pkgutil.walk_packages(pkg.__path__, PKG + "."):
        if info.name.split(".")[-1] in SKIP:
            continue
        importlib.import_module(info.name)
    loaded = sorted(set(sys.modules) - before)
    print(json.dumps(loaded))
    """
)


def _loaded_by(package: str, skip: tuple[str, ...] = ()) -> set[str]:
    code = f"PKG = {package!r}\nSKIP = {skip!r}\n" + _PROBE
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    return set(json.loads(out.stdout))


def _top(name: str) -> str:
    return name.split(".")[0]


def _third_party(mods: set[str]) -> set[str]:
    std = set(sys.stdlib_module_names) | {"__future__"}
    return {m for m in mods if _top(m) not in std and not _top(m).startswith("_")}


def test_broker_mqtt_imports_only_the_standard_library() -> None:
    foreign = {m for m in _third_party(_loaded_by("broker.mqtt")) if _top(m) != "broker"}
    assert foreign == set()
    broker_mods = {m for m in _loaded_by("broker.mqtt") if _top(m) == "broker"}
    assert all(m == "broker" or m.startswith("broker.mqtt") for m in broker_mods)


def test_radix_imports_only_its_extension_and_cffi() -> None:
    foreign = _third_party(_loaded_by("radix", skip=("build_radix",)))
    assert {_top(m) for m in foreign} <= {"radix", "cffi"}


@pytest.mark.parametrize("package", ["store", "pipeline"])
def test_store_and_pipeline_never_import_broker_or_trio(package: str) -> None:
    tops = {_top(m) for m in _loaded_by(package)}
    assert "broker" not in tops
    assert "trio" not in tops

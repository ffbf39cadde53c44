"""The import rules of ARCHITECTURE.md §2, checked in a fresh interpreter per layer.

Each check imports every module of a layer (walking the package) and then looks
at ``sys.modules``: a layer passes only if nothing outside its allowance was
loaded, directly or transitively.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import hotpath

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


# Loaded with any layer of broker or store: the guard of the compiled hot path (hotpath/,
# standard library only), and the shared library of the build when there is one.
_HOTPATH = {"hotpath", f"{hotpath.GROUP}__mypyc"}


def test_broker_mqtt_imports_only_the_standard_library() -> None:
    loaded = _loaded_by("broker.mqtt")
    foreign = {m for m in _third_party(loaded) if _top(m) != "broker"}
    assert foreign <= _HOTPATH
    broker_mods = {m for m in loaded if _top(m) == "broker"}
    assert all(m == "broker" or m.startswith("broker.mqtt") for m in broker_mods)


def test_radix_imports_only_its_extension_and_cffi() -> None:
    foreign = _third_party(_loaded_by("radix", skip=("build_radix",)))
    assert {_top(m) for m in foreign} <= {"radix", "cffi"}


@pytest.mark.parametrize("package", ["store", "pipeline"])
def test_store_and_pipeline_never_import_broker_or_trio(package: str) -> None:
    tops = {_top(m) for m in _loaded_by(package)}
    assert "broker" not in tops
    assert "trio" not in tops


# -- the shape rules of issue 20 (ARCHITECTURE.md §2, STYLE.md) -----------------------------

_ROOT = Path(__file__).resolve().parents[1]
_PRODUCT = ("broker", "client", "radix", "store", "pipeline", "hotpath")
_BROKER_REDESIGN = pytest.mark.xfail(strict=True, reason="issue 20: broker redesign")
MAX_MODULE_LINES = 600
# What today's broker breaks, named so that a new offender fails and a fixed one (XPASS,
# strict) has to leave these lists.
_BROKER_PACKAGES_WITH_CYCLES: set[str] = set()
_BROKER_MODULES_OVER_600: set[str] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` (module ``name``) imports anywhere in its
    source: under ``TYPE_CHECKING`` and inside functions too (they are dependencies)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from pkg import mod` imports the submodule, `from mod import name` the module.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        # (A target that is no source module here, such as radix's compiled _radix, is left out.)
        out |= {t for t in targets if t in known and t != name}
    return out


def _packages() -> list[str]:
    found = []
    for top in _PRODUCT:
        found += [_module_name(p) for p in sorted((_ROOT / top).rglob("__init__.py"))]
    return found


def _cycles(package: str) -> list[list[str]]:
    """The import cycles among the modules of ``package`` (its sub-packages' included):
    strongly connected components of more than one module (Tarjan)."""
    top = _ROOT.joinpath(*package.split("."))
    files = {_module_name(p): p for p in top.rglob("*.py")}
    known = set(files)
    graph = {m: _imports_of(p, m, known) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize(
    "package",
    [
        pytest.param(p, marks=_BROKER_REDESIGN) if p in _BROKER_PACKAGES_WITH_CYCLES else p
        for p in _packages()
    ],
)
def test_no_import_cycle_inside_a_package(package: str) -> None:
    assert _cycles(package) == []


def test_import_cycles_are_found() -> None:
    """The graph sees a cycle made only of imports under TYPE_CHECKING (the check above
    would pass vacuously otherwise)."""
    known = {"p.a", "p.b"}
    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d, "a.py"), Path(d, "b.py")
        a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import X\n")
        b.write_text("from p import a\n")
        assert _imports_of(a, "p.a", known) == {"p.b"}
        assert _imports_of(b, "p.b", known) == {"p.a"}


def test_broker_core_imports_no_trio() -> None:
    """ARCHITECTURE.md §2: the hub and everything it uses run without trio (time and timers
    come in through ports); every module of broker.core is imported."""
    loaded = _loaded_by("broker.core")
    assert "broker.core.hub" in loaded
    assert "trio" not in {_top(m) for m in loaded}


def _product_files() -> list[Path]:
    return sorted(p for top in _PRODUCT for p in (_ROOT / top).rglob("*.py"))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=_BROKER_REDESIGN)
        if p.relative_to(_ROOT).as_posix() in _BROKER_MODULES_OVER_600
        else p
        for p in _product_files()
    ],
    ids=lambda p: str(p.relative_to(_ROOT)),
)
def test_no_product_module_over_600_lines(path: Path) -> None:
    assert _lines(path) <= MAX_MODULE_LINES


# The read side a Spark executor imports: the key/record layout and the read-only env.
_READ_SIDE = {"store", "store.failures", "store.headerblock", "store.keys", "store.readonly"}


@pytest.mark.parametrize("module", ["store.keys", "store.readonly"])
def test_the_store_read_side_loads_no_pydantic_and_no_engine(module: str) -> None:
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    loaded = set(json.loads(out.stdout))
    assert {m for m in loaded if _top(m) == "pydantic"} == set()
    assert {m for m in loaded if _top(m) == "store"} <= _READ_SIDE
    assert {_top(m) for m in _third_party(loaded)} <= {"store", "lmdb", "hotpath"}


# The client (issue 21) speaks MQTT through broker.mqtt and reads the store's wire models;
# it never loads the broker's hub, network, persistence, the store's engine or LMDB.
_CLIENT_STORE = {
    "store",
    "store.errors",
    "store.failures",
    "store.gojson",
    "store.headerblock",
    "store.models",
    "store.pausestate",
    "store.topics",
}


def test_client_imports_only_broker_mqtt_and_the_light_store_modules() -> None:
    loaded = _loaded_by("client")
    broker_mods = {m for m in loaded if _top(m) == "broker"}
    assert all(m == "broker" or m.startswith("broker.mqtt") for m in broker_mods), broker_mods
    assert {m for m in loaded if _top(m) == "store"} <= _CLIENT_STORE
    assert {_top(m) for m in _third_party(loaded)} <= {
        "hotpath",
        "anyio",
        "broker",
        "client",
        "idna",
        "pydantic",
        "pydantic_core",
        "sniffio",
        "store",
        "typing_extensions",
        "typing_inspection",
        "annotated_types",
        "exceptiongroup",
    }


def test_the_jetmq_command_loads_the_client_only_for_its_verbs() -> None:
    """``jetmq serve`` lists the client verbs (client.verbs) without loading the client."""
    code = (
        "import sys, json; from broker.cli import _build_parser; _build_parser();"
        " print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    loaded = set(json.loads(out.stdout))
    assert {m for m in loaded if _top(m) == "client"} == {"client", "client.verbs"}
    assert "anyio" not in {_top(m) for m in loaded}

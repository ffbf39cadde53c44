"""scripts/check_coverage.py: judges only broker/mqtt/, on real Cobertura layouts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "check_coverage", ROOT / "scripts" / "check_coverage.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _report(tmp_path: Path, sources: list[str], classes: list[tuple[str, str, str, str]]) -> str:
    """classes: (filename, line-rate, branch-rate, extra <line> xml)."""
    body = "".join(
        f'<class name="{name}" filename="{name}" line-rate="{lr}" branch-rate="{br}">'
        f"<methods/><lines>{lines}</lines></class>"
        for name, lr, br, lines in classes
    )
    src = "".join(f"<source>{s}</source>" for s in sources)
    xml = (
        '<?xml version="1.0" ?><coverage><sources>'
        + src
        + '</sources><packages><package name="."><classes>'
        + body
        + "</classes></package></packages></coverage>"
    )
    path = tmp_path / "coverage.xml"
    path.write_text(xml)
    return str(path)


FULL = '<line number="1" hits="1"/>'
MISSING = '<line number="7" hits="0"/><line number="9" hits="1" branch="true" condition-coverage="50% (1/2)"/>'


def test_passes_when_every_mqtt_file_is_complete_and_ignores_other_packages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The layout of the full suite: one <source> per package, names relative to it.
    report = _report(
        tmp_path,
        [str(ROOT / "broker"), str(ROOT / "store")],
        [
            ("mqtt/codec.py", "1", "1", FULL),
            ("mqtt/decoder.py", "1", "1", FULL),
            ("config.py", "0.5", "0.25", MISSING),  # broker/config.py: not judged
            ("streams.py", "0.1", "0", MISSING),  # store/streams.py: not judged
        ],
    )
    assert _script().main([report]) == 0
    assert "2 files under broker/mqtt/" in capsys.readouterr().out


def test_fails_on_a_missing_line_or_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The layout of --cov=broker/mqtt: the package itself is the source root.
    report = _report(
        tmp_path,
        [str(ROOT / "broker" / "mqtt")],
        [("codec.py", "1", "1", FULL), ("decoder.py", "0.9", "0.5", MISSING)],
    )
    assert _script().main([report]) == 1
    err = capsys.readouterr().err
    assert "broker/mqtt/decoder.py: line-rate 0.9000, branch-rate 0.5000" in err
    assert "missing lines 7" in err
    assert "partial branches at 9 (50% (1/2))" in err
    assert "codec.py" not in err


def test_fails_when_no_mqtt_file_was_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(tmp_path, [str(ROOT / "store")], [("streams.py", "1", "1", FULL)])
    assert _script().main([report]) == 1
    assert "no file under broker/mqtt/" in capsys.readouterr().err


def test_unreadable_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text("<coverage")
    assert _script().main([str(bad)]) == 2
    assert _script().main([str(tmp_path / "absent.xml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_long_lists_are_shortened() -> None:
    script = _script()
    assert script._first([str(i) for i in range(20)], 3) == "0, 1, 2 and 17 more"

#!/usr/bin/env python3
"""Fail unless every file under broker/mqtt/ has 100% line and branch coverage.

Reads a Cobertura ``coverage.xml`` (as written by ``pytest --cov-branch
--cov-report=xml``). Only files whose path is under ``broker/mqtt/`` are judged; the
other packages are reported by coverage itself and are not held to 100% here.

Usage: ``scripts/check_coverage.py coverage.xml [--prefix broker/mqtt/]``
Exit status: 0 when every judged file is at line-rate and branch-rate 1.0; 1 otherwise
(including when the report holds no file under the prefix); 2 on an unreadable report.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PREFIX = "broker/mqtt/"
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class FileCoverage:
    path: str
    line_rate: float
    branch_rate: float
    missing_lines: tuple[int, ...]
    partial_branches: tuple[str, ...]


def _resolve(sources: list[str], filename: str, root: Path) -> str:
    """The repo-relative path of a report entry.

    Cobertura names each file relative to one of the report's <source> roots; the entry
    belongs to the root under which the file exists (the first root if none exists, e.g.
    a report read on another machine).
    """
    name = filename.replace("\\", "/")
    candidates = [Path(src) / name for src in sources] or [Path(name)]
    chosen = next((c for c in candidates if c.exists()), candidates[0])
    try:
        return chosen.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return chosen.as_posix()


def read_report(path: str, root: Path = REPO_ROOT) -> list[FileCoverage]:
    """Every <class> of the report, with its path relative to ``root``."""
    tree = ET.parse(path).getroot()
    sources = [s.text or "" for s in tree.iter("source")]
    files: list[FileCoverage] = []
    for cls in tree.iter("class"):
        filename = _resolve(sources, cls.get("filename", ""), root)
        missing: list[int] = []
        partial: list[str] = []
        for line in cls.iter("line"):
            number = int(line.get("number", "0"))
            if line.get("hits") == "0":
                missing.append(number)
            if line.get("branch") == "true" and not line.get("condition-coverage", "").startswith(
                "100%"
            ):
                partial.append(f"{number} ({line.get('condition-coverage', '?')})")
        files.append(
            FileCoverage(
                filename,
                float(cls.get("line-rate", "0")),
                float(cls.get("branch-rate", "0")),
                tuple(missing),
                tuple(partial),
            )
        )
    return files


def judge(files: list[FileCoverage], prefix: str) -> list[str]:
    """Problems found (empty = pass)."""
    judged = [f for f in files if _under(f.path, prefix)]
    if not judged:
        return [f"no file under {prefix} in the coverage report (was it measured?)"]
    problems: list[str] = []
    for f in sorted(judged, key=lambda f: f.path):
        if f.line_rate < 1.0 or f.branch_rate < 1.0:
            detail = []
            if f.missing_lines:
                detail.append("missing lines " + _first(list(map(str, f.missing_lines))))
            if f.partial_branches:
                detail.append("partial branches at " + _first(list(f.partial_branches)))
            problems.append(
                f"{f.path}: line-rate {f.line_rate:.4f}, branch-rate {f.branch_rate:.4f}"
                + (f" ({'; '.join(detail)})" if detail else "")
            )
    return problems


def _first(items: list[str], limit: int = 12) -> str:
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" and {more} more" if more > 0 else "")


def _under(path: str, prefix: str) -> bool:
    return path.startswith(prefix)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="require 100% coverage of broker/mqtt/")
    parser.add_argument("report", help="Cobertura coverage.xml")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help="directory held to 100%%")
    parser.add_argument("--root", default=str(REPO_ROOT), help="repository root")
    args = parser.parse_args(argv)
    try:
        files = read_report(args.report, Path(args.root))
    except (OSError, ET.ParseError) as exc:
        print(f"check_coverage: cannot read {args.report}: {exc}", file=sys.stderr)
        return 2
    problems = judge(files, args.prefix)
    if problems:
        print(
            f"check_coverage: {args.prefix} must have 100% line and branch coverage:",
            file=sys.stderr,
        )
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    count = sum(1 for f in files if _under(f.path, args.prefix))
    print(f"check_coverage: {count} files under {args.prefix} at 100% lines and branches")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Parsing and printing for the CLI: sizes, durations, tables (the ``nats`` CLI's look)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from store.models import go_duration

_NS = 1_000_000_000
_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": _NS,
    "m": 60 * _NS,
    "h": 3600 * _NS,
    "d": 86400 * _NS,
    "w": 7 * 86400 * _NS,
    "y": 365 * 86400 * _NS,
}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d|w|y)")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGTP]?)(I?B?)$", re.IGNORECASE)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def parse_duration(text: str) -> int:
    """``1h30m``, ``500ms``, ``2d``, ``-1``/``0``/``unlimited`` -> nanoseconds (0 = none).
    A bare number is seconds. ValueError names the text otherwise."""
    t = text.strip().lower()
    if t in ("", "0", "-1", "unlimited", "inf", "none"):
        return 0
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return int(float(t) * _NS)
    pos, total = 0, 0
    for m in _DURATION.finditer(t):
        if m.start() != pos:
            break
        total += int(float(m.group(1)) * _UNITS[m.group(2)])
        pos = m.end()
    if pos != len(t) or pos == 0:
        raise ValueError(f"invalid duration {text!r} (examples: 30s, 1h30m, 500ms, 7d)")
    return total


def parse_size(text: str) -> int:
    """``1024``, ``1KB``/``1KiB`` (1024), ``5MB``, ``-1``/``unlimited`` -> bytes (-1 =
    unlimited), as the nats CLI reads them (powers of 1024)."""
    t = text.strip()
    if t.lower() in ("-1", "unlimited", "none"):
        return -1
    m = _SIZE.match(t)
    if m is None:
        raise ValueError(f"invalid size {text!r} (examples: 1024, 512KB, 1GB, -1)")
    return int(float(m.group(1)) * 1024 ** _POWERS[m.group(2).upper()])


def parse_count(text: str) -> int:
    t = text.strip().lower()
    if t in ("-1", "unlimited", "none"):
        return -1
    try:
        return int(t)
    except ValueError:
        raise ValueError(f"invalid number {text!r}") from None


def human_size(n: int) -> str:
    if n < 0:
        return "unlimited"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def human_count(n: int) -> str:
    return "unlimited" if n < 0 else f"{n:,}"


def human_duration(ns: int | None) -> str:
    """Go's ``time.Duration`` text of ``ns`` (``2m0s``, ``168h0m0s``); ``unlimited`` for
    0/None."""
    return go_duration(ns) if ns else "unlimited"


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A box-drawn table with a title row, as ``nats stream ls`` prints."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    inner = sum(widths) + 3 * len(widths) - 1
    inner = max(inner, len(title) + 2)
    widths[-1] += inner - (sum(widths) + 3 * len(widths) - 1)
    lines = ["╭" + "─" * inner + "╮", "│" + title.center(inner) + "│"]
    lines.append("├" + "┬".join("─" * (w + 2) for w in widths) + "┤")
    lines.append(
        "│" + "│".join(f" {h.ljust(w)} " for h, w in zip(headers, widths, strict=True)) + "│"
    )
    lines.append("├" + "┼".join("─" * (w + 2) for w in widths) + "┤")
    for row in cells:
        lines.append(
            "│" + "│".join(f" {c.ljust(w)} " for c, w in zip(row, widths, strict=True)) + "│"
        )
    lines.append("╰" + "┴".join("─" * (w + 2) for w in widths) + "╯")
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """``Label: value`` lines, labels right-aligned (``nats stream info``)."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.rjust(width)}: {v}" for k, v in pairs)

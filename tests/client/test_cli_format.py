"""The CLI's parsers and printers (no I/O)."""

from __future__ import annotations

import pytest

from client.cli_format import (
    fields,
    human_duration,
    human_size,
    parse_count,
    parse_duration,
    parse_size,
    table,
)

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("30s", 30 * S),
        ("1h30m", 5400 * S),
        ("500ms", S // 2),
        ("7d", 7 * 86400 * S),
        ("1.5s", 3 * S // 2),
        ("2", 2 * S),
        ("0", 0),
        ("unlimited", 0),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize("bad", ["soon", "1x", "h", "1h 2m", "-5s"])
def test_parse_duration_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "n"),
    [("1024", 1024), ("1KB", 1024), ("512KiB", 512 * 1024), ("1GB", 1 << 30), ("-1", -1)],
)
def test_parse_size(text: str, n: int) -> None:
    assert parse_size(text) == n


def test_parse_size_and_count_refuse() -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size("lots")
    with pytest.raises(ValueError, match="invalid number"):
        parse_count("ten")
    assert parse_count("unlimited") == -1


def test_human_values() -> None:
    assert human_duration(120 * S) == "2m0s"
    assert human_duration(7 * 86400 * S) == "168h0m0s"
    assert human_duration(0) == "unlimited"
    assert human_size(-1) == "unlimited"
    assert human_size(92) == "92 B"
    assert human_size(1 << 30) == "1.0 GiB"


def test_table_and_fields_line_up() -> None:
    out = table("Streams", ("Name", "Messages"), [("ORDERS", 1), ("B", 22)]).splitlines()
    assert len({len(line) for line in out}) == 1  # every line as wide as the box
    assert out[1].strip("│").strip() == "Streams"
    assert out[3] == "│ Name   │ Messages │"
    assert out[5] == "│ ORDERS │ 1        │"
    assert fields([("A", 1), ("Long", "x")]).splitlines() == ["   A: 1", "Long: x"]

"""Brute-force MQTT matching used as the oracle by the radix tests (MQTT 5 4.7)."""

from __future__ import annotations


def split_share(filt: bytes) -> tuple[bytes | None, bytes]:
    """(share name, inner filter) for a valid filter."""
    if filt.startswith(b"$share/"):
        _, share, inner = filt.split(b"/", 2)
        return share, inner
    return None, filt


def filter_matches(filt: bytes, topic: bytes) -> bool:
    """Does a valid (inner) filter match a valid topic name?"""
    fl = filt.split(b"/")
    tl = topic.split(b"/")
    if topic.startswith(b"$") and fl[0] in (b"+", b"#"):
        return False  # [MQTT-4.7.2-1]
    for i, lv in enumerate(fl):
        if lv == b"#":
            return True  # also the parent level: i == len(tl)
        if i >= len(tl):
            return False
        if lv != b"+" and lv != tl[i]:
            return False
    return len(fl) == len(tl)


class BruteIndex:
    """Subscriptions as a plain dict, matched by scanning every one of them."""

    def __init__(self) -> None:
        self.subs: dict[tuple[bytes, int], int] = {}

    def subscribe(self, filt: bytes, client: int, handle: int) -> bool:
        new = (filt, client) not in self.subs
        self.subs[(filt, client)] = handle
        return new

    def unsubscribe(self, filt: bytes, client: int) -> bool:
        return self.subs.pop((filt, client), None) is not None

    def nonshared(self, topic: bytes) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for (filt, client), handle in self.subs.items():
            share, inner = split_share(filt)
            if share is None and filter_matches(inner, topic):
                out.setdefault(client, []).append(handle)
        return out

    def groups(self, topic: bytes) -> dict[tuple[bytes, bytes], dict[int, int]]:
        out: dict[tuple[bytes, bytes], dict[int, int]] = {}
        for (filt, client), handle in self.subs.items():
            share, inner = split_share(filt)
            if share is not None and filter_matches(inner, topic):
                out.setdefault((share, inner), {})[client] = handle
        return out


def _encoding_error(data: bytes, strict: bool) -> str | None:
    """First encoding violation, left to right (spec 6.2.2 pass 1)."""
    i = 0
    while i < len(data):
        b = data[i]
        if b < 0x80:
            if b == 0:
                return "E_NUL"
            cp = b
            i += 1
        else:
            need = (
                1
                if 0xC2 <= b <= 0xDF
                else 2
                if 0xE0 <= b <= 0xEF
                else 3
                if 0xF0 <= b <= 0xF4
                else 0
            )
            chunk = data[i : i + need + 1]
            if not need or len(chunk) != need + 1:
                return "E_UTF8"
            try:
                cp = ord(chunk.decode("utf-8"))  # rejects overlongs, surrogates, > U+10FFFF
            except UnicodeDecodeError:
                return "E_UTF8"
            i += need + 1
        if strict:
            if 0x01 <= cp <= 0x1F or 0x7F <= cp <= 0x9F:
                return "E_CONTROL"
            if 0xFDD0 <= cp <= 0xFDEF or (cp & 0xFFFE) == 0xFFFE:
                return "E_NONCHAR"
    return None


def topic_error(data: bytes, strict: bool = True) -> str | None:
    """Reference validator for PUBLISH topic names: the cause's code name, or None."""
    if not data:
        return "E_EMPTY"
    if len(data) > 65535:
        return "E_TOO_LONG"
    err = _encoding_error(data, strict)
    if err:
        return err
    if b"+" in data or b"#" in data:
        return "E_WILDCARD"
    return None


def filter_error(data: bytes, strict: bool = True) -> str | None:
    """Reference validator for SUBSCRIBE filters (a misplaced '+' wins over '#' in a level)."""
    if not data:
        return "E_EMPTY"
    if len(data) > 65535:
        return "E_TOO_LONG"
    err = _encoding_error(data, strict)
    if err:
        return err
    inner = data
    if data.startswith(b"$share/"):
        rest = data[7:]
        if b"/" not in rest:
            return "E_SHARE"
        name, inner = rest.split(b"/", 1)
        if not name or b"+" in name or b"#" in name or not inner:
            return "E_SHARE"
    levels = inner.split(b"/")
    for i, lv in enumerate(levels):
        if b"+" in lv and lv != b"+":
            return "E_PLUS"
        if b"#" in lv and (lv != b"#" or i != len(levels) - 1):
            return "E_HASH"
    return None

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

"""NATS subject rules used by streams and consumers: validity, matching, overlap.

A subject is ``.``-separated tokens. ``*`` matches exactly one token, ``>`` (only as
the last token) matches one or more tokens. Wildcards are whole tokens only; ``a*``
is a literal token (as in nats-server). Asset names (streams, consumers) follow
``isValidAssetName`` of spec §1.1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

_BAD_SUBJECT_CHARS = frozenset(" \t\r\n\f\x00")
_BAD_NAME_CHARS = frozenset(" \t\r\n\f.*>\\/\x00")


_BAD_SUBJECT_RE = re.compile("[" + re.escape("".join(sorted(_BAD_SUBJECT_CHARS))) + "]")


def is_valid_subject(subject: str, *, wildcards: bool = True) -> bool:
    """True when ``subject`` is a well-formed subject (a literal one if not ``wildcards``).

    Written with C-level string operations only: every publish checks its subject, and
    the broker's subjects are mostly unique (no cache helps).
    """
    if not subject or _BAD_SUBJECT_RE.search(subject):
        return False
    tokens = subject.split(".")
    if "" in tokens:
        return False
    if "*" in tokens or ">" in tokens:
        if not wildcards:
            return False
        if ">" in tokens[:-1]:
            return False
    return True


def is_literal(subject: str) -> bool:
    return not any(t in ("*", ">") for t in subject.split("."))


def is_valid_name(name: str) -> bool:
    return bool(name) and len(name.encode()) <= 255 and not any(c in _BAD_NAME_CHARS for c in name)


# Subjects up to this length have their tokens cached: 65,536 cached 64 KiB subjects (an
# MQTT topic may be that long) would hold GiBs.
_CACHED_SUBJECT_MAX = 1024


def _tokens(subject: str) -> tuple[str, ...]:
    if len(subject) <= _CACHED_SUBJECT_MAX:
        return _short_tokens(subject)
    return tuple(subject.split("."))


@lru_cache(maxsize=65536)
def _short_tokens(subject: str) -> tuple[str, ...]:
    return tuple(subject.split("."))


@lru_cache(maxsize=4096)
def _tail_prefix(filter_: str) -> str | None:
    """``"a.b."`` for a filter ``"a.b.>"`` with no other wildcard token, else None."""
    if not filter_.endswith(".>"):
        return None
    head = filter_[:-2].split(".")
    if "*" in head or ">" in head:
        return None
    return filter_[:-1]


def subject_matches(filter_: str, subject: str) -> bool:
    """Does the literal ``subject`` match ``filter_`` (which may hold wildcards)?"""
    if filter_ == subject or filter_ == ">":
        return True
    prefix = _tail_prefix(filter_)
    if prefix is not None:  # the common stream filter: a literal prefix and ">"
        return len(subject) > len(prefix) and subject.startswith(prefix)
    ft = _tokens(filter_)
    st = _tokens(subject)
    n = len(ft)
    for i, f in enumerate(ft):
        if f == ">":
            return len(st) > i
        if i >= len(st):
            return False
        if f != "*" and f != st[i]:
            return False
    return n == len(st)


def subjects_overlap(a: str, b: str) -> bool:
    """True when some literal subject matches both ``a`` and ``b``."""
    at = _tokens(a)
    bt = _tokens(b)
    for i in range(max(len(at), len(bt))):
        x = at[i] if i < len(at) else None
        y = bt[i] if i < len(bt) else None
        if x is None or y is None:
            return False
        if x == ">" or y == ">":
            return True
        if x == "*" or y == "*" or x == y:
            continue
        return False
    return True


def subset_of(sub: str, sup: str) -> bool:
    """True when every subject matched by ``sub`` is also matched by ``sup``."""
    st = _tokens(sub)
    pt = _tokens(sup)
    for i, p in enumerate(pt):
        if p == ">":
            return len(st) > i
        if i >= len(st):
            return False
        s = st[i]
        if s == ">":
            return False
        if p == "*":
            continue
        if s == "*" or s != p:
            return False
    return len(st) == len(pt)


def matcher(filters: tuple[str, ...]) -> Callable[[str], bool]:
    """:func:`matches_any` for fixed non-empty ``filters``, built once: a single
    ``prefix.>`` filter (the broker's streams) becomes one ``startswith``, anything else
    one regular expression (a tenth of the token comparison's time per subject, which
    counts where a consumer walks a stream's records)."""
    if len(filters) == 1 and (prefix := _tail_prefix(filters[0])) is not None:
        n = len(prefix)
        return lambda subject: len(subject) > n and subject.startswith(prefix)
    full = re.compile("|".join(_filter_regex(f) for f in filters), re.DOTALL).fullmatch
    return lambda subject: full(subject) is not None


def _filter_regex(filter_: str) -> str:
    """A regular expression whose full match is :func:`subject_matches` of ``filter_``:
    ``*`` is any one token, a last ``>`` at least one more."""
    parts = []
    for tok in filter_.split("."):
        if tok == "*":
            parts.append("[^.]*")
        elif tok == ">":
            parts.append(".+")
        else:
            parts.append(re.escape(tok))
    return r"(?:" + r"\.".join(parts) + ")"


def matches_any(filters: tuple[str, ...], subject: str) -> bool:
    """Empty ``filters`` means "everything"."""
    if not filters:
        return True
    return any(subject_matches(f, subject) for f in filters)


def literal_prefix(filter_: str) -> str:
    """The tokens of ``filter_`` before its first wildcard, with their trailing dot."""
    out: list[str] = []
    for tok in filter_.split("."):
        if tok in ("*", ">"):
            return ".".join(out) + "." if out else ""
        out.append(tok)
    return filter_

"""Filters Spark pushes to the batch reader (pyspark >= 4.1, ``pushFilters``).

What is taken, and how (everything else stays with Spark):

| column    | filters                                  | effect                         | Spark re-checks |
|-----------|------------------------------------------|--------------------------------|-----------------|
| ``stream``| ``=``, ``IN``                            | streams not read at all        | no              |
| ``seq``   | ``=``, ``<``, ``<=``, ``>``, ``>=``      | partition ranges narrowed      | no              |
| ``seq``   | ``IN``                                   | ranges narrowed to min..max    | yes             |
| ``subject``| ``=``, ``IN``, ``STARTSWITH``           | rows dropped in ``read()``     | no              |
| ``ts``    | ``<``, ``<=``, ``>``, ``>=`` (tz-aware)  | rows dropped in ``read()``     | yes             |

``ts`` filters stay with Spark as well: the exact value conversion of a timestamp
literal is Spark's, and keeping a row too many is harmless.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Pushed:
    """The filters taken, as bounds and sets (AND of everything)."""

    streams: frozenset[str] | None = None
    seq_min: int = 0
    seq_max: int | None = None
    subjects: frozenset[str] | None = None  # exact subjects
    prefixes: tuple[str, ...] = field(default=())  # every one must match
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None

    def subject_predicate(self, base: Callable[[str], bool] | None) -> Callable[[str], bool] | None:
        """One predicate over the subject: ``base`` (the subjectFilter option) and these."""
        checks: list[Callable[[str], bool]] = []
        if base is not None:
            checks.append(base)
        if self.subjects is not None:
            checks.append(self.subjects.__contains__)
        checks.extend(_starts(p) for p in self.prefixes)
        if not checks:
            return None
        if len(checks) == 1:
            return checks[0]
        return lambda s: all(c(s) for c in checks)


def _starts(prefix: str) -> Callable[[str], bool]:
    return lambda s: s.startswith(prefix)


def _ns(value: Any) -> int | None:
    """Unix ns of a tz-aware datetime (None for anything else: not pruned)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    return None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def push(pushed: Pushed, filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """Take what :class:`Pushed` can of ``filters``; return it and the filters left to Spark."""
    left: list[Filter] = []
    for f in filters:
        taken, keep = _take(pushed, f)
        if taken is not None:
            pushed = taken
        if keep:
            left.append(f)
    return pushed, left


def _take(p: Pushed, f: Filter) -> tuple[Pushed | None, bool]:
    """``(new Pushed or None, whether Spark must still evaluate f)``."""
    attr = getattr(f, "attribute", None)
    if attr is None or len(attr) != 1:
        return None, True
    col = attr[0]
    value: Any = getattr(f, "value", None)
    if col == "stream":
        if isinstance(f, EqualTo) and isinstance(value, str):
            names = frozenset((value,))
        elif isinstance(f, In) and all(isinstance(v, str) for v in value):
            names = frozenset(value)
        else:
            return None, True
        return replace(p, streams=names if p.streams is None else p.streams & names), False
    if col == "seq":
        if isinstance(f, In):
            ints = [v for v in value if type(v) is int]
            if len(ints) != len(value) or not ints:
                return None, True
            return _seq(p, min(ints), max(ints)), True
        n = _int(value)
        if n is None:
            return None, True
        if isinstance(f, EqualTo):
            return _seq(p, n, n), False
        if isinstance(f, GreaterThan):
            return _seq(p, n + 1, None), False
        if isinstance(f, GreaterThanOrEqual):
            return _seq(p, n, None), False
        if isinstance(f, LessThan):
            return _seq(p, 0, n - 1), False
        if isinstance(f, LessThanOrEqual):
            return _seq(p, 0, n), False
        return None, True
    if col == "subject":
        if isinstance(f, EqualTo) and isinstance(value, str):
            subs = frozenset((value,))
        elif isinstance(f, In) and all(isinstance(v, str) for v in value):
            subs = frozenset(value)
        elif isinstance(f, StringStartsWith) and isinstance(value, str):
            return replace(p, prefixes=(*p.prefixes, value)), False
        else:
            return None, True
        return replace(p, subjects=subs if p.subjects is None else p.subjects & subs), False
    if col == "ts":
        ns = _ns(value)
        if ns is None:
            return None, True
        if isinstance(f, GreaterThan | GreaterThanOrEqual):
            lo = ns if p.ts_min_ns is None else max(ns, p.ts_min_ns)
            return replace(p, ts_min_ns=lo), True
        if isinstance(f, LessThan | LessThanOrEqual):
            ns += 999  # a row's ts is its ns time cut to microseconds
            hi = ns if p.ts_max_ns is None else min(ns, p.ts_max_ns)
            return replace(p, ts_max_ns=hi), True
    return None, True


def _seq(p: Pushed, lo: int, hi: int | None) -> Pushed:
    new_hi = hi if p.seq_max is None else (p.seq_max if hi is None else min(hi, p.seq_max))
    return replace(p, seq_min=max(p.seq_min, lo), seq_max=new_hi)

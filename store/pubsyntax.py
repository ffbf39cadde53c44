"""The syntax checks of a publish that need no stream: its subject, header names, the
numbers in headers, and the headers of features this store does not have."""

from __future__ import annotations

from functools import lru_cache

from store import keys
from store.subjects import is_valid_subject

MAX_SUBJECT = 480  # bytes: keeps every index key under LMDB's 511-byte key limit
_HEADER_BAD = frozenset("\r\n")

# Headers of nats-server features a stream must enable, none of which this store has.
DISABLED_FEATURES = (
    ("Nats-Batch-Id", "atomic_publish_disabled"),
    ("Nats-Incr", "counters_disabled"),
    ("Nats-Schedule", "schedules_disabled"),
)


@lru_cache(maxsize=1024)
def header_name_ok(name: str) -> bool:
    """Header names repeat (the broker sends the same four on every message): cached."""
    return bool(name) and not any(c in _HEADER_BAD or c == ":" or c.isspace() for c in name)


def publish_subject_ok(subject: str) -> bool:
    # More characters than MAX_SUBJECT bytes can hold: refused without entering the cache
    # (whose keys stay short: a topic, and so a subject, may be 65,535 bytes).
    return len(subject) <= MAX_SUBJECT and _short_subject_ok(subject)


@lru_cache(maxsize=65536)
def _short_subject_ok(subject: str) -> bool:
    if not is_valid_subject(subject, wildcards=False):
        return False
    try:
        return len(subject.encode()) <= MAX_SUBJECT
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8
        return False


def parse_u64(raw: str) -> int | None:
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()):  # str.isdigit takes other scripts' digits
        return None
    n = int(raw)
    return n if n <= keys.MAX_U64 else None

"""MQTT topic <-> NATS subject conversion, byte-identical to nats-server (spec/jetstream.md §2.2).

Streams declare NATS subjects; an MQTT topic is matched against them after this
conversion, and the NATS bridge uses the same mapping, so a nats-server MQTT
client on the same subject space sees identical subjects. It lives in ``store`` (pure
string rules, no MQTT state) because both the broker (``broker.subjects``) and the
pipeline, which never imports ``broker``, need it.

Rules for ``/`` (first matching case wins): it is the first character, or the
last character emitted was ``.`` (an empty level) -> ``/.``; it is the last
character, or the next input character is ``/`` -> ``./``; otherwise ``.``.
``.`` becomes ``//``. If the result ends with ``.``, a ``/`` is appended.
Filters map ``+`` -> ``*`` and ``#`` -> ``>``. Space, tab, CR, LF, FF and DEL
cannot be expressed and are refused. Unlike nats-server we also refuse ``*``
and ``>`` inside topic levels, which it would pass through as NATS wildcards.
"""

from __future__ import annotations

_UNSUPPORTED = frozenset(" \t\r\n\f\x7f")


class SubjectConversionError(ValueError):
    """The topic or filter cannot be expressed as a NATS subject."""


def _convert(topic: str, *, is_filter: bool) -> str:
    out: list[str] = []
    last = ""  # last character emitted
    n = len(topic)
    for i, ch in enumerate(topic):
        if ch == "/":
            if i == 0 or last == ".":
                piece = "/."
            elif i == n - 1 or topic[i + 1] == "/":
                piece = "./"
            else:
                piece = "."
        elif ch == ".":
            piece = "//"
        elif ch in _UNSUPPORTED:
            raise SubjectConversionError(f"character {ch!r} is not supported in MQTT topics")
        elif ch == "+" or ch == "#":
            if not is_filter:
                raise SubjectConversionError("wildcards are not allowed in a publish topic")
            piece = "*" if ch == "+" else ">"
        elif ch == "*" or ch == ">":
            raise SubjectConversionError(f"{ch!r} would be a NATS wildcard; not allowed in topics")
        else:
            piece = ch
        out.append(piece)
        last = piece[-1]
    if last == ".":
        out.append("/")
    return "".join(out)


def topic_to_subject(topic: str) -> str:
    """Convert a publish topic name to the NATS subject nats-server would use."""
    return _convert(topic, is_filter=False)


def filter_to_subject(topic_filter: str) -> str:
    """Convert a subscription filter (``+``/``#`` allowed) to a NATS subject filter.

    Note ``a/#`` maps to ``a.>``, which in NATS does not match ``a`` itself; a
    NATS-facing subscription for it also needs :func:`filter_to_subject` of the
    parent (``a``).
    """
    return _convert(topic_filter, is_filter=True)


def subject_to_topic(subject: str) -> str:
    """Reverse conversion: ``/.`` -> ``/``, ``//`` -> ``.``, other ``/`` dropped, ``.`` -> ``/``."""
    out: list[str] = []
    i = 0
    n = len(subject)
    while i < n:
        ch = subject[i]
        if ch == "/":
            nxt = subject[i + 1] if i + 1 < n else ""
            if nxt == ".":
                out.append("/")
                i += 2
                continue
            if nxt == "/":
                out.append(".")
                i += 2
                continue
            i += 1
            continue
        out.append("/" if ch == "." else ch)
        i += 1
    return "".join(out)

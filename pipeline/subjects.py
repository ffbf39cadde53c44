"""NATS subjects as the pipeline sees them: the MQTT topic of a stored subject, and
NATS-style wildcard matching for ``subjectFilter``.

The reverse conversion follows nats-server's topic -> subject rules (spec/jetstream.md
§2.2), inverted: ``/.`` -> ``/``, ``//`` -> ``.``, any other ``/`` dropped (it only
marked an empty level), ``.`` -> ``/``. It is written here again rather than imported
because ``pipeline`` never imports ``broker``; tests/pipeline checks both agree.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=65536)
def subject_to_topic(subject: str) -> str:
    """The MQTT topic a stored NATS subject came from (cached: subjects repeat)."""
    if "/" not in subject:
        return subject.replace(".", "/")
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


class SubjectFilter:
    """A NATS subject filter (``*`` one token, ``>`` one or more trailing tokens)."""

    __slots__ = ("_tail", "_tokens", "text")

    def __init__(self, text: str) -> None:
        tokens = text.split(".")
        if not text or any(not t for t in tokens):
            raise ValueError(f"subjectFilter {text!r} is not a NATS subject filter")
        if ">" in tokens[:-1]:
            raise ValueError(f"subjectFilter {text!r}: '>' must be the last token")
        self.text = text
        self._tail = tokens[-1] == ">"
        self._tokens = tuple(tokens[:-1] if self._tail else tokens)

    def matches(self, subject: str) -> bool:
        parts = subject.split(".")
        want = self._tokens
        if self._tail:
            if len(parts) <= len(want):
                return False
        elif len(parts) != len(want):
            return False
        return all(w == "*" or w == p for w, p in zip(want, parts, strict=False))

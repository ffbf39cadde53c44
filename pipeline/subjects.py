"""NATS subjects as the pipeline sees them: the MQTT topic of a stored subject, and
NATS-style wildcard matching for ``subjectFilter``.

The conversion is ``store.topics`` (nats-server's rules, spec/jetstream.md §2.2), which the
broker uses too.
"""

from __future__ import annotations

from functools import lru_cache

from store import topics

# The MQTT topic a stored NATS subject came from (cached: subjects repeat).
subject_to_topic = lru_cache(maxsize=65536)(topics.subject_to_topic)


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

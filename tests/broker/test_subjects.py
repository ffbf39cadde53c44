"""Topic <-> subject conversion against nats-server's own vectors (spec/jetstream.md §2.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.subjects import (
    SubjectConversionError,
    filter_to_subject,
    subject_to_topic,
    topic_to_subject,
)

TOPIC_VECTORS = [
    ("foo/bar", "foo.bar"),
    ("/foo/bar", "/.foo.bar"),
    ("/foo/bar/", "/.foo.bar./"),
    ("foo//bar", "foo./.bar"),
    ("foo///bar", "foo././.bar"),
    ("foo.bar/baz", "foo//bar.baz"),
    ("foo../bar/.", "foo////.bar.//"),
    ("/", "/./"),
    ("//", "/././"),
    ("///foo//", "/././.foo././"),
    ("bar/", "bar./"),
    (".", "//"),
    ("./foo/.", "//.foo.//"),
    ("//.foo.//", "/././/foo//././"),
]

FILTER_VECTORS = [
    ("+", "*"),
    ("/+", "/.*"),
    ("+/", "*./"),
    ("foo//+//", "foo./.*././"),
    ("#", ">"),
    ("/#", "/.>"),
    ("foo//#", "foo./.>"),
    ("foo/bar.baz/#", "foo.bar//baz.>"),
]


@pytest.mark.parametrize(("topic", "subject"), TOPIC_VECTORS)
def test_topic_vectors_both_directions(topic: str, subject: str) -> None:
    assert topic_to_subject(topic) == subject
    assert subject_to_topic(subject) == topic


@pytest.mark.parametrize(("topic_filter", "subject"), FILTER_VECTORS)
def test_filter_vectors(topic_filter: str, subject: str) -> None:
    assert filter_to_subject(topic_filter) == subject


@pytest.mark.parametrize("bad", ["a b", "a\tb", "a\rb", "a\nb", "a\fb", "a\x7fb"])
def test_unsupported_characters_are_refused(bad: str) -> None:
    with pytest.raises(SubjectConversionError, match="not supported"):
        topic_to_subject(bad)


@pytest.mark.parametrize("bad", ["a/+/b", "a/#", "a/*/b", "a>b"])
def test_wildcards_in_topics_are_refused(bad: str) -> None:
    with pytest.raises(SubjectConversionError):
        topic_to_subject(bad)


_topic_chars = st.sampled_from(["a", "b", "/", ".", "é", "$", "-"])


@given(st.lists(_topic_chars, min_size=1, max_size=12).map("".join))
def test_every_valid_topic_round_trips(topic: str) -> None:
    assert subject_to_topic(topic_to_subject(topic)) == topic

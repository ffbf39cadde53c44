"""Spec section 7.5: topic aliases in both directions, with their MQTT limits."""

from __future__ import annotations

import pytest

import radix
from radix import AliasDirection as D


@pytest.fixture
def idx() -> radix.TopicIndex:
    return radix.TopicIndex()


def test_inbound_set_and_lookup(idx: radix.TopicIndex) -> None:
    idx.alias_set(1, D.INBOUND, 8, 10, b"baz/bam")
    assert idx.alias_topic(1, D.INBOUND, 8) == b"baz/bam"


@pytest.mark.parametrize(("alias", "maximum"), [(0, 10), (11, 10), (1, 0)])
def test_alias_range(idx: radix.TopicIndex, alias: int, maximum: int) -> None:
    with pytest.raises(radix.AliasRangeError):
        idx.alias_set(1, D.INBOUND, alias, maximum, b"x")


def test_alias_at_maximum_is_allowed(idx: radix.TopicIndex) -> None:
    idx.alias_set(1, D.INBOUND, 65535, 65535, b"x")
    assert idx.alias_topic(1, D.INBOUND, 65535) == b"x"


def test_unknown_alias(idx: radix.TopicIndex) -> None:
    with pytest.raises(radix.AliasUnknownError):
        idx.alias_topic(1, D.INBOUND, 9)


def test_inbound_aliases_may_share_a_topic(idx: radix.TopicIndex) -> None:
    idx.alias_set(1, D.INBOUND, 8, 10, b"x/y")
    idx.alias_set(1, D.INBOUND, 9, 10, b"x/y")
    assert idx.alias_topic(1, D.INBOUND, 8) == b"x/y"
    assert idx.alias_topic(1, D.INBOUND, 9) == b"x/y"
    assert idx.alias_of_topic(1, D.INBOUND, b"x/y") == 8
    idx.alias_set(1, D.INBOUND, 8, 10, b"other")
    assert idx.alias_topic(1, D.INBOUND, 8) == b"other"
    assert idx.alias_topic(1, D.INBOUND, 9) == b"x/y"


def test_alias_topic_is_validated(idx: radix.TopicIndex) -> None:
    with pytest.raises(radix.WildcardInTopicError):
        idx.alias_set(1, D.INBOUND, 3, 10, b"a/+")


def test_outbound_range(idx: radix.TopicIndex) -> None:
    with pytest.raises(radix.AliasRangeError):
        idx.alias_set(1, D.OUTBOUND, 8, 2, b"foo/bar")


def test_outbound_is_one_to_one(idx: radix.TopicIndex) -> None:
    idx.alias_set(1, D.OUTBOUND, 1, 2, b"foo/bar")
    idx.alias_set(1, D.OUTBOUND, 2, 2, b"foo/bar")
    assert idx.alias_of_topic(1, D.OUTBOUND, b"foo/bar") == 2
    with pytest.raises(radix.AliasUnknownError):
        idx.alias_topic(1, D.OUTBOUND, 1)
    idx.alias_set(1, D.OUTBOUND, 2, 2, b"other")
    assert idx.alias_of_topic(1, D.OUTBOUND, b"foo/bar") is None
    assert idx.alias_of_topic(1, D.OUTBOUND, b"other") == 2


def test_clear_drops_aliases_not_subscriptions(idx: radix.TopicIndex) -> None:
    empty = idx.bytes_used
    idx.subscribe(b"a/b", 1, 0)
    with_sub = idx.bytes_used
    idx.alias_set(1, D.INBOUND, 8, 10, b"baz/bam")
    idx.alias_set(1, D.OUTBOUND, 1, 2, b"foo/bar")
    idx.alias_set(2, D.OUTBOUND, 1, 2, b"foo/bar")
    idx.alias_clear(1)
    with pytest.raises(radix.AliasUnknownError):
        idx.alias_topic(1, D.INBOUND, 8)
    with pytest.raises(radix.AliasUnknownError):
        idx.alias_topic(1, D.OUTBOUND, 1)
    assert idx.alias_of_topic(1, D.OUTBOUND, b"foo/bar") is None
    assert idx.alias_of_topic(1, D.INBOUND, b"baz/bam") is None
    assert idx.alias_of_topic(2, D.OUTBOUND, b"foo/bar") == 1
    assert idx.match(b"a/b") == [1]
    idx.alias_clear(2)
    assert idx.bytes_used == with_sub
    idx.unsubscribe(b"a/b", 1)
    assert idx.bytes_used == empty


def test_long_alias_topic_grows_the_buffer(idx: radix.TopicIndex) -> None:
    topic = b"t/" * 1000 + b"end"
    idx.alias_set(7, D.INBOUND, 1, 1, topic)
    assert idx.alias_topic(7, D.INBOUND, 1) == topic

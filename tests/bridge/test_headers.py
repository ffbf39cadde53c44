"""The bridge's conversions: topic <-> subject vectors (spec §2.2) through the bridge's own
functions, with and without a subject prefix, and the Mqtt-* header round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.bridge.headers import (
    BadSubject,
    NotOurHeaders,
    forward_headers,
    imported,
    subject_for,
    topic_for,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties

VECTORS = [
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


@pytest.mark.parametrize(("topic", "subject"), VECTORS)
def test_conversion_vectors_both_ways(topic: str, subject: str) -> None:
    assert subject_for(topic, "") == subject
    assert topic_for(subject, "") == topic
    assert subject_for(topic, "edge.mq") == "edge.mq." + subject
    assert topic_for("edge.mq." + subject, "edge.mq") == topic


@pytest.mark.parametrize("topic", ["a b", "a\tb", "a/*/b", "a/>", "a/+", "a/#", "x\x7f"])
def test_topics_that_cannot_be_subjects(topic: str) -> None:
    with pytest.raises(BadSubject):
        subject_for(topic, "")


@pytest.mark.parametrize(
    "subject", ["a.+", "a.#", "$SYS.broker", "$JS.API.INFO", "$MQTT.sess.x", "//x", ""]
)
def test_subjects_that_cannot_be_topics(subject: str) -> None:
    if subject == "//x":
        assert topic_for(subject, "") == ".x"  # a valid one among them
        return
    with pytest.raises(BadSubject):
        topic_for(subject, "")


FULL = Properties(
    payload_format_indicator=1,
    content_type="application/jsön; x=%41",
    response_topic="re/plies/ü/%",
    correlation_data=b"\x00\x01\xfe\xff",
    user_properties=(("k", "1"), ("k", "2"), ("clé", "välue"), ("", ""), ("k", "1")),
)


def test_header_round_trip_keeps_repeated_keys_and_non_ascii() -> None:
    h = forward_headers("edge-1", "a/ü/b.c", 2, True, FULL, 100.0, 40.0)
    assert all(k.isascii() and v.isascii() for k, v in h.items())
    assert h["Mqtt-Message-Expiry"] == "60"
    got = imported(
        "mq." + subject_for("a/ü/b.c", ""),
        h,
        origin="edge-2",
        prefix="mq",
        rule_qos=1,
        rule_retain=True,
    )
    assert got.topic == "a/ü/b.c"
    assert got.qos == 1  # min(2, rule 1)
    assert got.retain is True
    assert not got.ours
    assert got.properties.user_properties == FULL.user_properties
    assert got.properties.content_type == FULL.content_type
    assert got.properties.response_topic == FULL.response_topic
    assert got.properties.correlation_data == FULL.correlation_data
    assert got.properties.payload_format_indicator == 1
    assert got.properties.message_expiry_interval == 60


@given(
    st.lists(st.tuples(st.text(), st.text()), max_size=5),
    st.text(min_size=1).filter(lambda t: "\x00" not in t),
)
def test_user_properties_and_content_type_survive_any_text(
    pairs: list[tuple[str, str]], text: str
) -> None:
    props = Properties(content_type=text, user_properties=tuple(pairs))
    h = forward_headers("o", "t", 0, False, props, None, 0.0)
    assert all(v.isascii() and "\r" not in v and "\n" not in v for v in h.values())
    got = imported("t", h, origin="x", prefix="", rule_qos=0, rule_retain=False)
    assert got.properties.content_type == text
    assert got.properties.user_properties == tuple(pairs)


def test_plain_nats_messages_use_the_subject_and_the_rule() -> None:
    got = imported("cmd.a//b", None, origin="e", prefix="", rule_qos=1, rule_retain=True)
    assert (got.topic, got.qos, got.retain, got.properties) == (
        "cmd/a.b",
        1,
        True,
        EMPTY_PROPERTIES,
    )
    # Headers that are not ours at all are ignored.
    got = imported("x", {"Foo": "bar"}, origin="e", prefix="", rule_qos=0, rule_retain=False)
    assert got.topic == "x"


def test_our_own_origin_is_recognised() -> None:
    h = forward_headers("edge-1", "t", 0, False, EMPTY_PROPERTIES, None, 0.0)
    assert imported("t", h, origin="edge-1", prefix="", rule_qos=0, rule_retain=False).ours


@pytest.mark.parametrize(
    "bad",
    [
        {"Mqtt-Qos": "3"},
        {"Mqtt-Topic": "other"},  # does not match the subject
        {"Mqtt-Topic": "%ZZ%C3"},  # not percent-encoded UTF-8
        {"Mqtt-Payload-Format": "2"},
        {"Mqtt-Message-Expiry": "-1"},
        {"Mqtt-Correlation-Data": "***"},
        {"Mqtt-User-Properties": "[1, 2]"},
        {"Mqtt-User-Properties": "not json"},
    ],
)
def test_header_blocks_that_are_not_ours(bad: dict[str, str]) -> None:
    h = {"Mqtt-Origin": "other", "Mqtt-Topic": "t", **bad}
    with pytest.raises((NotOurHeaders, BadSubject)):
        imported("t", h, origin="e", prefix="", rule_qos=0, rule_retain=False)


def test_topic_header_must_match_whole_subject_tokens() -> None:
    with pytest.raises(NotOurHeaders):
        imported(
            "xa.b", {"Mqtt-Topic": "a/b"}, origin="e", prefix="", rule_qos=0, rule_retain=False
        )
    got = imported(
        "p.a.b", {"Mqtt-Topic": "a/b"}, origin="e", prefix="", rule_qos=0, rule_retain=False
    )
    assert got.topic == "a/b"

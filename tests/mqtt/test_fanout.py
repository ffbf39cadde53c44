"""EncodedPublish: encode once, patch per recipient; the result always equals encode()."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.mqtt.codec import Decoder, EncodedPublish, encode
from broker.mqtt.encoder import plain_qos0, plain_qos0_prefix
from broker.mqtt.errors import LocalProtocolError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Publish
from broker.mqtt.properties import Properties, publish_properties

from .mqtt_strategies import VERSIONS, publishes

V5 = ProtocolVersion.MQTT_5


def test_common_case_returns_the_same_bytes_object() -> None:
    message = EncodedPublish(Publish(b"a/b", b"payload", 1, True, True, 9), V5)
    first = message.for_recipient()
    assert first is message.for_recipient()
    assert first == encode(Publish(b"a/b", b"payload"), V5)
    retained = message.for_recipient(retain=True)
    assert retained is message.for_recipient(retain=True)
    assert retained != first


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    dup=st.booleans(),
    packet_id=st.integers(1, 0xFFFF),
    alias=st.none() | st.integers(1, 0xFFFF),
    omit=st.booleans(),
    sub_ids=st.lists(st.integers(1, 268_435_455), max_size=3).map(tuple),
    expiry=st.none() | st.integers(0, 0xFFFFFFFF),
)
def test_for_recipient_equals_a_full_encode(
    version: ProtocolVersion,
    data: st.DataObject,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int,
    alias: int | None,
    omit: bool,
    sub_ids: tuple[int, ...],
    expiry: int | None,
) -> None:
    original = data.draw(publishes(version))
    v5 = version is V5
    dup = dup and qos > 0
    alias = alias if v5 else None
    omit = omit and alias is not None
    message = EncodedPublish(original, version)
    wire = message.for_recipient(
        packet_id if qos else None, dup, qos, retain, alias, omit, sub_ids, expiry
    )
    props = original.properties
    if v5:
        props = replace(props, topic_alias=alias, subscription_identifiers=sub_ids)
        if expiry is not None:
            props = replace(props, message_expiry_interval=expiry)
    expected = Publish(
        b"" if omit else original.topic,
        original.payload,
        qos,
        retain,
        dup,
        packet_id if qos else None,
        props,
    )
    assert wire == encode(expected, version)
    assert Decoder(version).feed(wire) == [expected]


def test_as_publish_strips_the_alias_and_sets_identifiers() -> None:
    message = EncodedPublish(
        Publish(b"t", b"p", properties=Properties(topic_alias=3, content_type="c")), V5
    )
    got = message.as_publish(7, 1, True, False, (2,))
    assert got == Publish(
        b"t", b"p", 1, True, False, 7, Properties(content_type="c", subscription_identifiers=(2,))
    )
    plain = EncodedPublish(Publish(b"t", b"p"), V5)
    assert plain.as_publish(None, 0, False).properties is plain.publish.properties
    aged = plain.as_publish(None, 0, False, message_expiry_interval=9)
    assert aged.properties == Properties(message_expiry_interval=9)


def test_remaining_lifetime_replaces_the_expiry() -> None:
    original = Publish(
        b"t", b"p", properties=Properties(payload_format_indicator=1, message_expiry_interval=60)
    )
    message = EncodedPublish(original, V5)
    assert message.for_recipient() == encode(original, V5)
    later = message.for_recipient(message_expiry_interval=42)
    expected = Properties(payload_format_indicator=1, message_expiry_interval=42)
    assert Decoder(V5).feed(later) == [Publish(b"t", b"p", properties=expected)]
    assert message.for_recipient() is message.for_recipient()


def test_publish_properties_is_a_real_frozen_properties() -> None:
    assert publish_properties() == Properties()
    user = (("a", "1"), ("b", "2"))
    made = publish_properties(1, 60, "text/plain", "re/ply", b"cd", user)
    expected = Properties(
        payload_format_indicator=1,
        message_expiry_interval=60,
        content_type="text/plain",
        response_topic="re/ply",
        correlation_data=b"cd",
        user_properties=user,
    )
    assert type(made) is Properties
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert dataclasses.replace(made, content_type=None) == replace(expected, content_type=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.content_type = "x"  # type: ignore[misc]


def test_shared_user_properties_encode_as_their_own() -> None:
    user = (("Nats-Subject", "a/b"), ("k", "v"))
    first = Publish(
        b"t", b"1", properties=publish_properties(response_topic="r/1", user_properties=user)
    )
    second = Publish(
        b"t", b"2", properties=publish_properties(content_type="c", user_properties=user)
    )
    other = Publish(b"t", b"3", properties=Properties(user_properties=(("k", "w"),)))
    for p in (first, second, other, first):
        wire = EncodedPublish(p, V5).for_recipient()
        assert wire == encode(p, V5)
        assert Decoder(V5).feed(wire) == [p]


def test_a_property_not_allowed_in_publish_is_refused() -> None:
    with pytest.raises(LocalProtocolError, match="REASON_STRING"):
        EncodedPublish(Publish(b"t", properties=Properties(reason_string="no")), V5)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), retain=st.booleans(), qos0_first=st.booleans())
def test_qos0_is_the_shared_for_recipient(
    version: ProtocolVersion, data: st.DataObject, retain: bool, qos0_first: bool
) -> None:
    original = data.draw(publishes(version))
    message = EncodedPublish(original, version)
    if qos0_first:
        wire = message.qos0(retain)
        assert wire is message.for_recipient(retain=retain)
    else:
        wire = message.for_recipient(retain=retain)
        assert wire is message.qos0(retain)
    assert wire == EncodedPublish(original, version).for_recipient(retain=retain)
    assert message.qos0(not retain) == message.for_recipient(retain=not retain)
    for qos in (1, 2):
        assert message.copy(qos, retain, 7) == message.for_recipient(7, False, qos, retain)


def test_copy_is_for_qos_1_and_2_with_a_packet_id() -> None:
    message = EncodedPublish(Publish(b"t", b"p"), V5)
    with pytest.raises(LocalProtocolError, match="does not exist"):
        message.copy(3, False, 1)
    with pytest.raises(LocalProtocolError, match="non-zero packet identifier"):
        message.copy(1, False, 0)
    with pytest.raises(LocalProtocolError, match="QoS 1 and 2"):
        message.copy(0, False, 1)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=60, deadline=None)
@given(
    topic=st.binary(min_size=1, max_size=300).filter(lambda t: b"+" not in t and b"#" not in t),
    size=st.sampled_from([0, 1, 120, 127, 128, 16_380, 16_384, 70_000]),
    data=st.data(),
)
def test_plain_qos0_is_the_shared_copy_of_a_publish_without_properties(
    version: ProtocolVersion, topic: bytes, size: int, data: st.DataObject
) -> None:
    # Remaining Length in 1, 2 and 3 bytes (around 127 and 16,383 with the topic).
    payload = data.draw(st.binary(min_size=size, max_size=size + 3))
    wire = plain_qos0(plain_qos0_prefix(topic, version), payload)
    assert wire == EncodedPublish(Publish(topic, payload), version).qos0(False)
    assert wire == encode(Publish(topic, payload), version)


def test_plain_qos0_prefix_refuses_a_topic_over_65535_bytes() -> None:
    with pytest.raises(LocalProtocolError, match="exceeds 65535"):
        plain_qos0_prefix(b"t" * 0x10000, V5)

"""The header block of a stored message (``broker.persist.records.message_block``): the
layout its module doc writes down, read back by recovery the same way, whether its first
lines come from the per-topic cache (no properties) or are built for the message."""

from __future__ import annotations

import json

import pytest

import store
from broker.core.message import AppMessage
from broker.mqtt.packets import Publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.persist import records
from broker.persist.records import PEND_HEADER, message_block, message_from_stored
from store.headerblock import decode_headers

PROPS = Properties(
    payload_format_indicator=1,
    content_type="text/plain",
    response_topic="re/ply",
    correlation_data=b"\x00\xffid",
    user_properties=(("k", "v"), ("k", "w")),
)


def _message(topic: bytes, qos: int, retain: bool, props: Properties) -> AppMessage:
    return AppMessage(Publish(topic, b"payload", qos, retain, properties=props), None, 7)


@pytest.mark.parametrize("props", [EMPTY_PROPERTIES, PROPS], ids=["plain", "properties"])
@pytest.mark.parametrize(
    "topic",
    [b"a/b", 'q"uo\\te/\u00e9t\u00e9/\U0001f600'.encode(), b"long/" * 210],  # (1,050: not cached)
)
@pytest.mark.parametrize(("qos", "retain"), [(0, False), (1, True), (2, False)])
@pytest.mark.parametrize("pend", [None, '{"p":0,"q":1,"r":0,"s":[],"st":0}'])
def test_the_block_holds_the_documented_headers_and_reads_back(
    props: Properties, topic: bytes, qos: int, retain: bool, pend: str | None
) -> None:
    msg = _message(topic, qos, retain, props)
    block = message_block(msg, pend)
    assert block.startswith(b"NATS/1.0\r\n")
    assert block.endswith(b"\r\n\r\n")
    headers = dict(decode_headers(block))
    assert json.loads(headers.pop("Mqtt-Topic")) == topic.decode()
    assert headers.pop("Mqtt-Qos") == str(qos)
    assert headers.pop("Mqtt-Retain") == ("1" if retain else "0")
    props_json = json.loads(headers.pop("Mqtt-Props"))
    assert (props_json == {}) is (props is EMPTY_PROPERTIES)
    assert headers.pop(PEND_HEADER, None) == pend
    assert headers == {}
    # Recovery rebuilds the message the block was made for.
    stored = store.StoredMsg(1, 0, "$MQTT.msgs.x", decode_headers(block), b"payload")
    back = message_from_stored(stored, 0, 0.0)
    assert back is not None
    assert back.publish == msg.publish


def test_a_cached_head_is_the_same_bytes_as_one_built_afresh() -> None:
    """Two messages on one topic share the first lines; another topic, QoS or retain flag
    gets its own, and a message with properties never takes the cached ones; a long topic's
    lines (not cached) are the same as a short one's."""
    first = message_block(_message(b"t/1", 1, False, EMPTY_PROPERTIES), '{"a":1}')
    again = message_block(_message(b"t/1", 1, False, EMPTY_PROPERTIES), '{"a":2}')
    assert first.replace(b'{"a":1}', b'{"a":2}') == again
    others = {
        message_block(_message(b"t/2", 1, False, EMPTY_PROPERTIES)),
        message_block(_message(b"t/1", 0, False, EMPTY_PROPERTIES)),
        message_block(_message(b"t/1", 1, True, EMPTY_PROPERTIES)),
        message_block(_message(b"t/1", 1, False, PROPS)),
        message_block(_message(b"t/1", 1, False, EMPTY_PROPERTIES)),
    }
    assert len(others) == 5
    long_topic = b"t/" * 520
    heads, jsons = records._plain_head.cache_info(), records._short_topic_json.cache_info()
    assert message_block(_message(long_topic, 1, False, EMPTY_PROPERTIES), "{}") == message_block(
        _message(b"t/1", 1, False, EMPTY_PROPERTIES), "{}"
    ).replace(b"t/1", long_topic.decode().encode())
    # ... and neither of the two caches got a key for it (4,096 of them could hold GiBs).
    assert records._plain_head.cache_info().currsize == heads.currsize
    assert records._short_topic_json.cache_info().currsize == jsons.currsize

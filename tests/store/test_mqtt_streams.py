"""The MQTT state streams of spec §2.3-2.5, built on the engine exactly as nats-server does."""

from __future__ import annotations

from typing import Any

import pytest

from store import Ack, Delivery, JetStreamError, PubAck, Publish, Store
from tests.store.conftest import SEC, Events, FakeClock

STREAMS: list[dict[str, Any]] = [
    {"name": "$MQTT_sess", "subjects": ["$MQTT.sess.>"], "max_msgs_per_subject": 1},
    {"name": "$MQTT_msgs", "subjects": ["$MQTT.msgs.>"], "retention": "interest"},
    {"name": "$MQTT_rmsgs", "subjects": ["$MQTT.rmsgs.>"], "max_msgs_per_subject": 1},
    {
        "name": "$MQTT_qos2in",
        "subjects": ["$MQTT.qos2.in.>"],
        "discard": "new",
        "max_msgs_per_subject": 1,
        "discard_new_per_subject": True,
    },
    {"name": "$MQTT_out", "subjects": ["$MQTT.out.>"], "retention": "interest"},
]


@pytest.fixture
def mqtt(store: Store) -> Store:
    for cfg in STREAMS:
        store.create_stream(cfg)
    return store


def test_qos2_staging_is_exactly_once(mqtt: Store) -> None:
    ack = mqtt.publish("$MQTT.qos2.in.pub1.1", b"m", (("Nmqtt-Pub", "24"),))
    assert isinstance(ack, PubAck)
    with pytest.raises(JetStreamError) as ei:
        mqtt.publish("$MQTT.qos2.in.pub1.1", b"m")
    assert ei.value.description == "maximum messages per subject exceeded"
    # PUBREL: load, delete, deliver onward with a dedupe id.
    staged = mqtt.last_by_subject("$MQTT_qos2in", "$MQTT.qos2.in.pub1.1")
    mqtt.delete_msg("$MQTT_qos2in", staged.seq)
    msg_id = (("Nats-Msg-Id", f"q2-{staged.seq}"),)
    mqtt.create_consumer("$MQTT_msgs", {"durable_name": "s1", "ack_policy": "explicit"})
    first = mqtt.publish("$MQTT.msgs.a.b", b"m", msg_id)
    again = mqtt.publish("$MQTT.msgs.a.b", b"m", msg_id)
    assert first is not None
    assert again is not None
    assert (again.seq, again.duplicate) == (first.seq, True)


def test_session_record_compare_and_swap(mqtt: Store) -> None:
    subj = "$MQTT.sess.UH4PAlxE"
    cas0 = (("Nats-Expected-Last-Subject-Sequence", "0"),)
    a = mqtt.publish(subj, b'{"id":"c1"}', cas0)
    assert a is not None
    with pytest.raises(JetStreamError) as ei:
        mqtt.publish(subj, b'{"id":"c1","other":true}', cas0)  # a racing server loses
    assert ei.value.err_code == 10071
    cas = (("Nats-Expected-Last-Subject-Sequence", str(a.seq)),)
    b = mqtt.publish(subj, b'{"id":"c1","subs":{"a.>":1}}', cas)
    assert b is not None
    st = mqtt.stream_state("$MQTT_sess")
    assert (st.messages, st.num_subjects) == (1, 1)
    assert mqtt.last_by_subject("$MQTT_sess", subj).payload.endswith(b"}}")


def test_retained_one_per_topic_and_reload(mqtt: Store) -> None:
    mqtt.submit(
        [
            Publish("$MQTT.rmsgs.a.b", b"1", (("Nmqtt-RTopic", "a/b"),)),
            Publish("$MQTT.rmsgs.a.c", b"2"),
            Publish("$MQTT.rmsgs.a.b", b"3"),
        ]
    ).result(timeout=10)
    loaded = {m.subject: m.payload for m in mqtt.iter_msgs("$MQTT_rmsgs")}
    assert loaded == {"$MQTT.rmsgs.a.c": b"2", "$MQTT.rmsgs.a.b": b"3"}


def test_session_messages_live_until_every_subscriber_acks(
    mqtt: Store, events: Events, clock: FakeClock
) -> None:
    for name, filt in (("s1_sub", "$MQTT.msgs.a.*"), ("s2_sub", "$MQTT.msgs.a.b")):
        mqtt.create_consumer(
            "$MQTT_msgs",
            {
                "durable_name": name,
                "filter_subject": filt,
                "deliver_subject": f"$MQTT.sub.{name}",
                "deliver_policy": "new",
                "ack_policy": "explicit",
                "ack_wait": 30 * SEC,
                "max_ack_pending": 1024,
            },
        )
    mqtt.set_push_interest("$MQTT_msgs", "s1_sub", True)  # s2's client is offline
    mqtt.publish("$MQTT.msgs.a.b", b"q1")
    mqtt.publish("$MQTT.msgs.x.y", b"nobody")  # no interest: not stored
    got = [e for e in events.take() if isinstance(e, Delivery)]
    assert [(e.consumer, e.msg.payload) for e in got] == [("s1_sub", b"q1")]
    mqtt.submit([Ack("$MQTT_msgs", "s1_sub", got[0].msg.seq)]).result(timeout=10)
    assert mqtt.stream_state("$MQTT_msgs").messages == 1  # s2 still needs it
    mqtt.set_push_interest("$MQTT_msgs", "s2_sub", True)  # reconnect
    (late,) = [e for e in events.take() if isinstance(e, Delivery)]
    assert (late.consumer, late.msg.payload) == ("s2_sub", b"q1")
    mqtt.ack("$MQTT_msgs", "s2_sub", late.msg.seq)
    st = mqtt.stream_state("$MQTT_msgs")
    assert (st.messages, st.last_seq) == (0, 2)

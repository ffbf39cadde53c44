"""What a restart on the same data dir brings back, state by state (in-process brokers)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

import pytest

import store
from broker.mqtt.packets import (
    Disconnect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.persist import records as persist
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)

KEEP = Properties(session_expiry_interval=3600)


def _restart(
    make_broker: Callable[..., BrokerThread], broker: BrokerThread, data: pathlib.Path
) -> BrokerThread:
    broker.stop()
    return make_broker(data)


def test_sessions_subscriptions_and_queued_messages_survive_a_restart(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "d"
    broker = make_broker(data)
    with RawClient(broker.port) as c:
        c.connect("keeper", properties=KEEP)
        c.send(
            Subscribe(1, (Subscription(b"rec/#", 2),), Properties(subscription_identifiers=(5,)))
        )
        c.next()
        c.send(Disconnect())
    with RawClient(broker.port) as pub:
        pub.connect("rec-pub")
        pub.publish(b"rec/1", b"one", qos=1, packet_id=1)
        assert pub.expect(Puback).reason_code is ReasonCode.SUCCESS
        pub.publish(b"rec/2", b"two", qos=2, packet_id=2)
        assert pub.expect(Pubrec).reason_code is ReasonCode.SUCCESS
        pub.send(Pubrel(2))
        pub.expect(Pubcomp)
    broker = _restart(make_broker, broker, data)
    with RawClient(broker.port) as c:
        assert c.connect("keeper", clean_start=False, properties=KEEP).session_present
        first = c.expect_publish()
        assert (first.payload, first.qos) == (b"one", 1)
        assert first.properties.subscription_identifiers == (5,)
        second = c.expect(Publish)
        assert (second.payload, second.qos) == (b"two", 2)
        assert second.packet_id is not None
        c.send(Pubrec(second.packet_id))
        c.expect(Pubrel)
        c.send(Pubcomp(second.packet_id))
        # The subscription itself came back: a new message arrives live.
        with RawClient(broker.port) as pub:
            pub.connect("rec-pub-2")
            pub.publish(b"rec/3", b"three", qos=1, packet_id=1)
            pub.expect(Puback)
        assert c.expect_publish().payload == b"three"
        c.send(Disconnect())
    broker = _restart(make_broker, broker, data)
    with RawClient(broker.port) as c:
        c.connect("keeper", clean_start=False, properties=KEEP)
        assert c.nothing_within(0.3)  # acknowledged copies are gone for good


def test_inbound_qos2_is_exactly_once_across_a_restart(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "d"
    broker = make_broker(data)
    with RawClient(broker.port) as sub:
        sub.connect("x1-sub", properties=KEEP)
        sub.subscribe((b"x1/t", 1))
        sub.send(Disconnect())
    with RawClient(broker.port) as pub:
        pub.connect("x1-pub", properties=KEEP)
        pub.publish(b"x1/t", b"once", qos=2, packet_id=7)
        pub.expect(Pubrec)  # stored; the publisher crashes before PUBREL
    broker = _restart(make_broker, broker, data)
    with RawClient(broker.port) as pub:
        pub.connect("x1-pub", clean_start=False, properties=KEEP)
        pub.send(Publish(b"x1/t", b"once", 2, False, True, 7))  # the DUP resend
        pub.expect(Pubrec)
        pub.send(Pubrel(7))
        assert pub.expect(Pubcomp).reason_code is ReasonCode.SUCCESS
    with RawClient(broker.port) as sub:
        sub.connect("x1-sub", clean_start=False, properties=KEEP)
        assert sub.expect_publish().payload == b"once"
        assert sub.nothing_within(0.5)  # not twice


def test_outbound_qos2_resumes_with_its_packet_id_and_stage(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "d"
    broker = make_broker(data)
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("x2-sub", properties=KEEP)
        sub.subscribe((b"x2/#", 2))
        pub.connect("x2-pub")
        for i, topic in enumerate((b"x2/a", b"x2/b"), start=1):
            pub.publish(topic, topic[-1:], qos=2, packet_id=i)
            pub.expect(Pubrec)
            pub.send(Pubrel(i))
            pub.expect(Pubcomp)
        a = sub.expect(Publish)
        b = sub.expect(Publish)
        assert a.packet_id is not None
        assert b.packet_id is not None
        sub.send(Pubrec(a.packet_id))  # a: PUBREC sent, b: nothing yet
        sub.expect(Pubrel)
        sub.close()
    broker = _restart(make_broker, broker, data)
    with RawClient(broker.port) as sub:
        sub.connect("x2-sub", clean_start=False, properties=KEEP)
        again = [sub.next(), sub.next()]
        assert again[0] == Pubrel(a.packet_id)  # a: PUBREL again, never the PUBLISH
        resent = again[1]
        assert isinstance(resent, Publish)
        assert (resent.packet_id, resent.dup, resent.payload) == (b.packet_id, True, b"b")


def test_retained_messages_survive_and_expire_across_restarts(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "d"
    broker = make_broker(data)
    with RawClient(broker.port) as pub:
        pub.connect("ret")
        pub.publish(
            b"ret/a",
            b"kept",
            qos=1,
            packet_id=1,
            retain=True,
            user_properties=(("k", "v"),),
            content_type="text/plain",
        )
        pub.expect(Puback)
        pub.publish(b"ret/b", b"gone", qos=1, packet_id=2, retain=True)
        pub.expect(Puback)
        pub.publish(b"ret/b", b"", qos=1, packet_id=3, retain=True)
        pub.expect(Puback)
    broker = _restart(make_broker, broker, data)
    with RawClient(broker.port) as sub:
        sub.connect("ret-sub")
        sub.subscribe((b"ret/#", 1))
        got = sub.expect_publish()
        assert (got.topic, got.payload, got.retain) == (b"ret/a", b"kept", True)
        assert got.properties.user_properties == (("k", "v"),)
        assert got.properties.content_type == "text/plain"
        assert sub.nothing_within(0.3)


def test_clean_start_removes_stored_state(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "d"
    broker = make_broker(data)
    with RawClient(broker.port) as c:
        c.connect("wipe", properties=KEEP)
        c.subscribe((b"wipe/t", 1))
        c.send(Disconnect())
    with RawClient(broker.port) as c:
        c.connect("wipe", clean_start=True, properties=KEEP)
        c.send(Disconnect())
    broker = _restart(make_broker, broker, data)
    with RawClient(broker.port) as c, RawClient(broker.port) as pub:
        assert c.connect("wipe", clean_start=False, properties=KEEP).session_present
        pub.connect("wipe-pub")
        pub.publish(b"wipe/t", b"x", qos=1, packet_id=1)
        assert pub.expect(Puback).reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS


def test_copies_for_one_or_several_persistent_sessions_survive_and_leave_nothing_behind(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    """A message for one persistent session is stored inside its pending entry; one for
    several is stored once and referenced. Both come back after a restart, with their
    properties, and acknowledging every copy removes every record."""
    data = tmp_path / "d"
    broker = make_broker(data)
    for name, flt in (("many-1", b"both/#"), ("many-2", b"both/+"), ("many-2", b"only/2")):
        with RawClient(broker.port) as c:
            c.connect(name, clean_start=False, properties=KEEP)
            c.subscribe((flt, 2))
            c.send(Disconnect())
    with RawClient(broker.port) as pub:
        pub.connect("many-pub")
        pub.publish(b"both/x", b"shared", qos=1, packet_id=1, user_properties=(("a", "1"),))
        assert pub.expect(Puback).reason_code is ReasonCode.SUCCESS
        pub.publish(b"only/2", b"mine", qos=1, packet_id=2, content_type="text/plain")
        assert pub.expect(Puback).reason_code is ReasonCode.SUCCESS
    broker = _restart(make_broker, broker, data)
    got: dict[str, list[Publish]] = {}
    for name in ("many-1", "many-2"):
        with RawClient(broker.port) as c:
            c.connect(name, clean_start=False, properties=KEEP)
            got[name] = [c.expect_publish()]
            if name == "many-2":
                got[name].append(c.expect_publish())
            assert c.nothing_within(0.3)
            c.send(Disconnect())
    assert [(p.topic, p.payload) for p in got["many-1"]] == [(b"both/x", b"shared")]
    assert [(p.topic, p.payload) for p in got["many-2"]] == [
        (b"both/x", b"shared"),
        (b"only/2", b"mine"),
    ]
    assert got["many-1"][0].properties.user_properties == (("a", "1"),)
    assert got["many-2"][1].properties.content_type == "text/plain"
    broker.stop()
    with store.Store.open(data) as st:
        assert st.stream_state("$MQTT_msgs").messages == 0
        assert st.stream_state("$MQTT_pend").messages == 0


def test_a_publisher_gone_before_its_messages_commit_leaves_the_broker_serving(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    """The publisher's acknowledgements wait for a commit; it closes its socket first.
    The waiting steps still run (the messages are stored and delivered), and the
    connection's pipeline ends quietly instead of taking the broker down."""
    broker = make_broker(tmp_path / "d")
    with RawClient(broker.port) as sub:
        sub.connect("vanish-sub", properties=KEEP)
        sub.subscribe((b"vanish/#", 1))
        for n in range(3):
            with RawClient(broker.port) as pub:
                pub.connect(f"vanish-pub-{n}")
                pub.send_raw(
                    b"".join(
                        pub.encode(Publish(b"vanish/t", b"%d" % i, 1, packet_id=i))
                        for i in range(1, 41)
                    )
                )
            got = {sub.expect_publish().payload for _ in range(40)}
            assert got == {b"%d" % i for i in range(1, 41)}
        with RawClient(broker.port) as probe:
            probe.connect("vanish-probe")
            probe.publish(b"vanish/t", b"still here", qos=1, packet_id=1)
            assert probe.expect(Puback).reason_code is ReasonCode.SUCCESS
        assert sub.expect_publish().payload == b"still here"


def _stored(data: pathlib.Path, stream: str) -> list[store.StoredMsg]:
    with store.Store.open(data) as st:
        return list(st.iter_msgs(stream))


def test_each_subscription_is_its_own_record(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    """A SUBSCRIBE writes the subscriptions it adds, an UNSUBSCRIBE removes the ones it
    drops: the session record does not grow with them (it was rewritten whole on every
    SUBSCRIBE, 12.6 ms at the 10,000th subscription of one client)."""
    data = tmp_path / "d"
    broker = make_broker(data)
    with RawClient(broker.port) as c:
        c.connect("many", properties=KEEP)
        for i in range(50):
            c.subscribe((b"dev/%d/+" % i, 1), packet_id=i + 1)
        c.subscribe((b"dev/7/+", 0), packet_id=60)  # replaces its record
        c.send(Unsubscribe(61, (b"dev/3/+", b"not/subscribed")))
        assert c.expect(Unsuback).reason_codes == (
            ReasonCode.SUCCESS,
            ReasonCode.NO_SUBSCRIPTION_EXISTED,
        )
        c.send(Disconnect())
    broker.stop()
    (session,) = _stored(data, "$MQTT_sess")
    assert json.loads(session.payload) == {"id": "many", "expiry": 3600, "version": 5}
    subs = {tuple(json.loads(m.payload))[:2] for m in _stored(data, "$MQTT_subs")}
    assert subs == {(f"dev/{i}/+", 0 if i == 7 else 1) for i in range(50) if i != 3}
    broker = make_broker(data)
    with RawClient(broker.port) as c, RawClient(broker.port) as pub:
        assert c.connect("many", clean_start=False, properties=KEEP).session_present
        pub.connect("many-pub")
        for i in (3, 7, 8):
            pub.publish(b"dev/%d/x" % i, b"%d" % i, qos=1, packet_id=i)
            pub.expect(Puback)
        got = [c.expect_publish() for _ in range(2)]
        assert [(p.payload, p.qos) for p in got] == [(b"7", 0), (b"8", 1)]
        assert c.nothing_within(0.3)
        c.send(Disconnect(properties=Properties(session_expiry_interval=0)))
    broker.stop()
    assert _stored(data, "$MQTT_subs") == []  # the session ended: its records went too


def test_session_records_of_the_older_layout_are_moved(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    """A data dir written before subscriptions had records of their own: its session
    record holds the list. The broker restores from it and moves it to ``$MQTT_subs``."""
    data = tmp_path / "d"
    make_broker(data).stop()  # the broker's streams
    old = {
        "id": "veteran",
        "expiry": 3600,
        "version": 5,
        "subs": [["old/a", 1, 0, 0, 0, 0], ["old/b/#", 0, 0, 1, 2, 9]],
    }
    with store.Store.open(data) as st:
        st.submit(
            [
                store.Publish(
                    f"$MQTT.sess.{persist.token('veteran')}",
                    json.dumps(old, separators=(",", ":"), sort_keys=True).encode(),
                    stream="$MQTT_sess",
                )
            ]
        ).result(timeout=10)
    broker = make_broker(data)
    with RawClient(broker.port) as c, RawClient(broker.port) as pub:
        assert c.connect("veteran", clean_start=False, properties=KEEP).session_present
        pub.connect("vet-pub")
        pub.publish(b"old/a", b"a", qos=1, packet_id=1)
        pub.publish(b"old/b/c", b"b", qos=1, packet_id=2)
        got = [c.expect_publish() for _ in range(2)]
        assert [(p.payload, p.qos) for p in got] == [(b"a", 1), (b"b", 0)]
        assert got[1].properties.subscription_identifiers == (9,)
        c.send(Disconnect())
    broker.stop()
    (session,) = _stored(data, "$MQTT_sess")
    assert json.loads(session.payload) == {"id": "veteran", "expiry": 3600, "version": 5}
    assert sorted(json.loads(m.payload) for m in _stored(data, "$MQTT_subs")) == old["subs"]

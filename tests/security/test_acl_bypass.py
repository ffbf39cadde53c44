"""An ACL bypass suite, written as an attacker would, against a real broker: wildcards
around denied topics, ``$share`` around them, retained messages under a denied branch, a
will aimed at one, topic aliases re-pointed after a grant, client ids with wildcard
characters, ``$SYS`` / ``$JS`` without explicit grants, 3.1.1's silent drop."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Puback, Publish, Suback, Will
from broker.mqtt.reason_codes import ReasonCode
from broker.security.passwords import hash_password
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)
V311 = ProtocolVersion.MQTT_3_1_1
DENIED = ReasonCode.NOT_AUTHORIZED

ACL = """
topic read public/news/#

user eve
topic readwrite public/#
topic deny public/secret/#
topic write out/#
pattern readwrite clients/%c/#

user admin
topic readwrite #
topic readwrite $SYS/#
"""


@pytest.fixture
def broker(tmp_path: pathlib.Path, start_broker: Callable[[str], BrokerThread]) -> BrokerThread:
    pw = tmp_path / "passwd"
    pw.write_text(
        "".join(f"{u}:{hash_password(u + '-pw', iterations=1000)}\n" for u in ("eve", "admin"))
    )
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    return start_broker(
        '[[listeners]]\nbind = "127.0.0.1:0"\n'
        f'[auth]\nallow_anonymous = true\npassword_file = "{pw}"\nacl_file = "{acl}"\n'
    )


def login(
    port: int, user: str | None, client_id: str, version: ProtocolVersion = ProtocolVersion.MQTT_5
) -> RawClient:
    raw = RawClient(port, version=version)
    password = None if user is None else f"{user}-pw".encode()
    connack = raw.connect(client_id, username=user, password=password)
    assert connack.reason_code is ReasonCode.SUCCESS, connack
    return raw


def codes(packet: object) -> list[ReasonCode]:
    assert isinstance(packet, Suback), packet
    return list(packet.reason_codes)


def test_wildcards_that_overlap_a_denied_branch_are_refused(broker: BrokerThread) -> None:
    with login(broker.port, "eve", "eve-1") as eve:
        got = codes(
            eve.subscribe(
                (b"public/#", 1),
                (b"#", 1),
                (b"+/secret/x", 1),
                (b"public/+/x", 1),
                (b"public/news/#", 1),
                (b"public/secret/x", 1),
            )
        )
        assert got == [DENIED, DENIED, DENIED, DENIED, ReasonCode.GRANTED_QOS_1, DENIED]


def test_shared_subscriptions_around_a_denied_topic(broker: BrokerThread) -> None:
    with login(broker.port, "eve", "eve-2") as eve:
        got = codes(
            eve.subscribe(
                (b"$share/g/public/secret/x", 1),
                (b"$share/g/public/#", 1),
                (b"$share/g/public/news/#", 1),
            )
        )
        assert got == [DENIED, DENIED, ReasonCode.GRANTED_QOS_1]


def test_retained_messages_under_a_denied_branch_stay_hidden(broker: BrokerThread) -> None:
    with login(broker.port, "admin", "admin-1") as admin:
        admin.publish(b"public/secret/key", b"hunter2", qos=1, packet_id=1, retain=True)
        admin.expect(Puback)
        admin.publish(b"public/news/today", b"sunny", qos=1, packet_id=2, retain=True)
        admin.expect(Puback)
    with login(broker.port, "eve", "eve-3") as eve:
        assert codes(eve.subscribe((b"public/+/key", 1))) == [DENIED]
        assert codes(eve.subscribe((b"public/news/#", 1), packet_id=2)) == [
            ReasonCode.GRANTED_QOS_1
        ]
        got = eve.expect_publish()
        assert got.payload == b"sunny"
        assert eve.nothing_within(0.3)


def test_a_will_aimed_at_a_denied_topic_is_refused(broker: BrokerThread) -> None:
    with RawClient(broker.port) as raw:
        connack = raw.connect(
            "eve-4",
            username="eve",
            password=b"eve-pw",
            will=Will(b"public/secret/w", b"gotcha", 0, False),
        )
        assert connack.reason_code is DENIED


def test_publish_denied_v5_and_dropped_silently_in_3_1_1(broker: BrokerThread) -> None:
    with login(broker.port, "admin", "watcher") as watcher:
        assert codes(watcher.subscribe((b"#", 0))) == [ReasonCode.GRANTED_QOS_0]
        with login(broker.port, "eve", "eve-5") as eve:
            eve.publish(b"public/secret/leak", b"x", qos=1, packet_id=1)
            assert eve.expect(Puback).reason_code is DENIED
        with login(broker.port, "eve", "eve-6", version=V311) as eve3:
            eve3.publish(b"public/secret/leak", b"y", qos=1, packet_id=1)
            assert eve3.expect(Puback).reason_code is ReasonCode.SUCCESS  # acknowledged...
            eve3.publish(b"public/ok", b"visible", qos=1, packet_id=2)
            eve3.expect(Puback)
        assert watcher.expect_publish().payload == b"visible"  # ...and dropped
        assert watcher.nothing_within(0.3)


def test_topic_alias_re_pointed_after_a_grant(broker: BrokerThread) -> None:
    with login(broker.port, "admin", "watcher-2") as watcher:
        watcher.subscribe((b"admin/#", 0))
        with login(broker.port, "eve", "eve-7") as eve:
            eve.publish(b"out/x", b"granted", qos=1, packet_id=1, topic_alias=1)
            assert eve.expect(Puback).reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS
            eve.publish(b"admin/cmd", b"evil", qos=1, packet_id=2, topic_alias=1)
            assert eve.expect(Puback).reason_code is DENIED
            eve.publish(b"", b"evil again", qos=1, packet_id=3, topic_alias=1)
            assert eve.expect(Puback).reason_code is DENIED  # the alias now means admin/cmd
        assert watcher.nothing_within(0.3)


def test_client_ids_with_wildcards_get_nothing_from_patterns(broker: BrokerThread) -> None:
    with login(broker.port, "eve", "eve-8") as own:
        assert codes(own.subscribe((b"clients/eve-8/#", 1))) == [ReasonCode.GRANTED_QOS_1]
        assert codes(own.subscribe((b"clients/other/#", 1), packet_id=2)) == [DENIED]
    for cid in ("+", "#", "a/b"):
        with login(broker.port, "eve", cid) as sneaky:
            got = codes(
                sneaky.subscribe((b"clients/+/#", 1), (b"clients/#", 1), (b"clients/a/b", 1))
            )
            assert got == [DENIED, DENIED, DENIED]
            sneaky.publish(b"clients/a/b", b"x", qos=1, packet_id=5)
            assert sneaky.expect(Puback).reason_code is DENIED


def test_sys_and_js_topics_need_explicit_grants(broker: BrokerThread) -> None:
    with login(broker.port, "eve", "eve-9") as eve:
        assert codes(eve.subscribe((b"$SYS/#", 0), (b"$JS/API/#", 0))) == [DENIED, DENIED]
        eve.publish(b"$JS/API/STREAM/CREATE/ORDERS", b"{}", qos=1, packet_id=1)
        assert eve.expect(Puback).reason_code is DENIED
        eve.publish(b"$JS/ACK/ORDERS/other/1/1/1/0/0", b"+ACK", qos=1, packet_id=2)
        assert eve.expect(Puback).reason_code is DENIED
    with login(broker.port, "admin", "admin-2") as admin:
        assert codes(admin.subscribe((b"$SYS/#", 0))) == [ReasonCode.GRANTED_QOS_0]


def test_anonymous_section_is_honoured(broker: BrokerThread) -> None:
    with login(broker.port, None, "anon-1") as anon:
        got = codes(anon.subscribe((b"public/news/#", 1), (b"public/#", 1)))
        assert got == [ReasonCode.GRANTED_QOS_1, DENIED]
        anon.publish(b"public/news/x", b"no", qos=1, packet_id=3)
        assert anon.expect(Puback).reason_code is DENIED


def test_hide_denials_answers_unspecified_error(
    tmp_path: pathlib.Path, start_broker: Callable[[str], BrokerThread]
) -> None:
    """The configuration docs/security.md gives for Paho's test_subscribe_failure."""
    acl = tmp_path / "paho.acl"
    acl.write_text("topic readwrite test/#\ntopic deny test/nosubscribe\n")
    broker = start_broker(
        '[[listeners]]\nbind = "127.0.0.1:0"\n'
        f'[auth]\nallow_anonymous = true\nhide_denials = true\nacl_file = "{acl}"\n'
    )
    with login(broker.port, None, "myclientid") as client:
        got = codes(client.subscribe((b"test/nosubscribe", 2), (b"test/ok", 2)))
        assert got == [ReasonCode.UNSPECIFIED_ERROR, ReasonCode.GRANTED_QOS_2]
        client.publish(b"test/nosubscribe", b"x", qos=1, packet_id=7)
        ack = client.expect(Puback)
        assert ack.reason_code is ReasonCode.UNSPECIFIED_ERROR
        assert ack.properties.reason_string is None  # nothing revealed


JS_ACL = """
user alice
topic readwrite $JS/API/#
topic readwrite $JS/ACK/#
topic readwrite inbox/alice/#
topic readwrite orders/#

user bob
topic readwrite $JS/API/STREAM/INFO/#
topic readwrite inbox/bob/#
topic read orders/#
"""


def test_jetstream_api_and_ack_topics_of_another_users_consumer(
    tmp_path: pathlib.Path, start_broker: Callable[[str], BrokerThread]
) -> None:
    """bob may read orders and ask for stream info, nothing more: he can neither ack,
    pull from nor read the inbox of alice's consumer, and her pending message stays hers."""
    import json

    pw = tmp_path / "passwd"
    pw.write_text(
        "".join(f"{u}:{hash_password(u + '-pw', iterations=1000)}\n" for u in ("alice", "bob"))
    )
    acl = tmp_path / "acl"
    acl.write_text(JS_ACL)
    broker = start_broker(
        '[[listeners]]\nbind = "127.0.0.1:0"\n'
        f'[auth]\nallow_anonymous = false\npassword_file = "{pw}"\nacl_file = "{acl}"\n'
    )

    def published_and_acked(c: RawClient) -> Publish:
        """The next PUBLISH to ``c`` and the PUBACK of its own request, in either order."""
        got: Publish | None = None
        acked = False
        while got is None or not acked:
            packet = c.next()
            if isinstance(packet, Publish):
                if packet.qos == 1 and packet.packet_id is not None:
                    c.send(Puback(packet.packet_id))
                got = packet
            else:
                assert isinstance(packet, Puback), packet
                assert packet.reason_code is ReasonCode.SUCCESS, packet
                acked = True
        return got

    def api(c: RawClient, rest: bytes, body: dict[str, object], pid: int) -> dict[str, object]:
        c.publish(b"$JS/API/" + rest, json.dumps(body).encode() if body else b"", 1, pid,
                  response_topic="inbox/alice/r", correlation_data=b"%d" % pid)  # fmt: skip
        answer = published_and_acked(c)
        assert answer.properties.correlation_data == b"%d" % pid
        return json.loads(answer.payload)  # type: ignore[no-any-return]

    with login(broker.port, "alice", "alice-1") as alice, login(broker.port, "bob", "bob-1") as bob:
        assert codes(alice.subscribe((b"inbox/alice/#", 1))) == [ReasonCode.GRANTED_QOS_1]
        made = api(alice, b"STREAM/CREATE/ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]}, 1)
        assert "error" not in made, made
        cfg = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": 60 * 10**9}
        made = api(alice, b"CONSUMER/CREATE/ORDERS/C", {"stream_name": "ORDERS", "config": cfg}, 2)
        assert "error" not in made, made
        alice.publish(b"orders/1", b"order", 1, 3)
        assert alice.expect(Puback).reason_code is ReasonCode.SUCCESS
        alice.publish(b"$JS/API/CONSUMER/MSG/NEXT/ORDERS/C", b"1", 1, 4,
                      response_topic="inbox/alice/d")  # fmt: skip
        delivered = published_and_acked(alice)
        assert delivered.topic == b"inbox/alice/d"
        assert delivered.payload == b"order"
        ack_topic = delivered.properties.response_topic
        assert ack_topic is not None
        assert ack_topic.startswith("$JS/ACK/ORDERS/C/")

        # bob, from every side
        assert codes(bob.subscribe((b"inbox/alice/#", 1), (b"$JS/#", 0))) == [DENIED, DENIED]
        bob.publish(ack_topic.encode(), b"+ACK", 1, 1)
        assert bob.expect(Puback).reason_code is DENIED
        bob.publish(b"$JS/API/CONSUMER/MSG/NEXT/ORDERS/C", b"1", 1, 2,
                    response_topic="inbox/bob/d")  # fmt: skip
        assert bob.expect(Puback).reason_code is DENIED
        bob.publish(b"$JS/API/CONSUMER/DELETE/ORDERS/C", b"", 1, 3,
                    response_topic="inbox/bob/r")  # fmt: skip
        assert bob.expect(Puback).reason_code is DENIED
        # the packed bulk read (jetmq extension) is a DIRECT.GET: the same ACL
        bob.publish(b"$JS/API/DIRECT/GET/ORDERS", b'{"seq": 1, "batch": 10}', 1, 4,
                    response_topic="inbox/bob/p", user_properties=(("Jetmq-Pack", "1"),))  # fmt: skip
        assert bob.expect(Puback).reason_code is DENIED
        assert bob.nothing_within(0.3)

        info = api(alice, b"CONSUMER/INFO/ORDERS/C", {}, 5)
        assert info.get("num_ack_pending") == 1, info  # bob's +ACK did nothing

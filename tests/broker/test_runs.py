"""Publish runs (``broker.net.runs``): plain QoS 0/1 PUBLISHes to one topic in one chunk,
forwarded with the decisions made once, give every subscriber exactly the bytes the
PUBLISH-by-PUBLISH path gives.

The differential tests send one chunk twice to a fresh broker: as is (runs form), and
with a PINGREQ behind every PUBLISH (any other packet ends a run, so none forms), and
compare each subscriber's raw byte stream. ``open_run`` is checked on its own on a real
broker for each reason it declines a run.
"""

from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import load_config
from broker.mqtt.decoder import Decoder
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingresp,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.net.connection import ClientConnection
from broker.net.inbound import Inbound
from broker.net.runs import Run, StoredRun, open_run
from broker.net.runtime import Broker
from tests.broker.harness import BrokerThread, run_with_broker
from tests.broker.memclient import SockClient
from tests.broker.rawclient import RawClient
from tests.jetstream.jsclient import JsClient

pytestmark = pytest.mark.timeout(60)

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1
V31 = ProtocolVersion.MQTT_3_1
END = b"end"
PINGREQ = b"\xc0\x00"


@dataclass
class Sub:
    """A subscriber: its version, CONNECT properties and SUBSCRIBEs."""

    name: str
    version: ProtocolVersion = V5
    filters: tuple[tuple[bytes, int], ...] = ((b"t/#", 0),)
    connect: dict[str, Any] = field(default_factory=dict)
    subscribe: dict[str, Any] = field(default_factory=dict)


def _p(topic: bytes, payload: bytes, qos: int = 0, pid: int | None = None, **kw: Any) -> Publish:
    props = Properties(**kw.pop("props")) if "props" in kw else EMPTY_PROPERTIES
    return Publish(topic, payload, qos, kw.pop("retain", False), False, pid, props)


def _sequence() -> list[Publish]:
    """Runs of every length, payloads across the Remaining Length's 1/2/3-byte forms,
    broken by QoS 1, retain, properties and other topics."""
    seq = [_p(b"t/a", b"x" * n) for n in (0, 5, 100, 130, 200, 17_000)]
    seq.append(_p(b"t/a", b"q1", 1, 1))
    seq += [_p(b"t/a", b"after q1 %d" % i) for i in range(3)]
    seq.append(_p(b"t/a", b"retained", retain=True))
    seq += [_p(b"t/b", b"b%d" % i) for i in range(4)]
    seq += [_p(b"t/a", b"a%d" % i) for i in range(2)]
    seq.append(_p(b"t/a", b"with props", props={"user_properties": (("k", "v"),)}))
    seq += [_p(b"t/a", b"z%d" % i * 30) for i in range(40)]
    seq += [_p(b"t/c/d", b"c"), _p(b"t/c/d", b"cc"), _p(b"t/a", b"last")]
    # QoS 1 runs, QoS 0 and 1 taking turns on a topic, and QoS 1 no one receives (0x10).
    seq += [_p(b"t/q", b"q%d" % i, 1, 100 + i) for i in range(8)]
    seq += [_p(b"t/q", b"r%d" % i, i % 2, 200 + i if i % 2 else None) for i in range(8)]
    seq += [_p(b"u/none", b"n%d" % i, 1, 300 + i) for i in range(3)]
    # Topics taking turns (three axes of a sensor): every topic's run stays open.
    seq += [_p(b"t/%s" % axis, b"%d" % i) for i in range(12) for axis in (b"x", b"y", b"z/1")]
    # QoS 1 topics taking turns (stored runs, where a persistent session takes them).
    seq += [
        _p(b"t/%s" % a, b"%d" % i, 1, 600 + 2 * i + j)
        for i in range(6)
        for j, a in enumerate((b"x", b"y"))
    ]
    return seq


def _connect(port: int, sub: Sub) -> RawClient:
    c = RawClient(port, version=sub.version)
    with contextlib.ExitStack() as on_error:
        on_error.callback(c.close)
        _subscribe(c, sub)
        on_error.pop_all()
    return c


def _subscribe(c: RawClient, sub: Sub) -> None:
    assert isinstance(c.connect(sub.name, properties=Properties(**sub.connect)), Connack)
    filters = (*sub.filters, (END, 0))
    subs = tuple(Subscription(f, q) for f, q in filters)
    c.send(Subscribe(1, subs, Properties(**sub.subscribe)))
    suback = c.next()
    assert isinstance(suback, Suback)
    assert all(code < 0x80 for code in suback.reason_codes), suback


def _collect(c: RawClient) -> bytes:
    """The raw bytes the broker sends ``c`` up to and including the PUBLISH to END."""
    decoder = Decoder(c.version)
    got = bytearray()
    deadline = time.monotonic() + 10
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "no PUBLISH to the end topic"
        c.sock.settimeout(remaining)
        data = c.sock.recv(65536)
        assert data, "the broker closed the connection"
        got += data
        if any(isinstance(p, Publish) and p.topic == END for p in decoder.feed(data)):
            return bytes(got)


def _run_once(
    data_dir: pathlib.Path,
    subs: list[Sub],
    sequence: list[Publish],
    pinged: bool,
    setup: Callable[[int], None] | None = None,
    **overrides: dict[str, Any],
) -> dict[str, bytes]:
    """Each subscriber's bytes from a fresh broker (config ``overrides``) after
    ``sequence`` is sent in one chunk (``pinged``: a PINGREQ behind every PUBLISH), then,
    once the broker answered the chunk's last PINGREQ, a PUBLISH to END. ``setup(port)``
    runs once the subscribers are connected."""
    sections: dict[str, dict[str, Any]] = {
        "listener": {"listen": ["127.0.0.1:0"]},
        "storage": {"data_dir": str(data_dir)},
    }
    config = load_config(None, sections | overrides)
    broker = BrokerThread(config)
    broker.start()
    with contextlib.ExitStack() as closing:
        closing.callback(broker.stop)
        clients = {}
        for sub in subs:
            clients[sub.name] = closing.enter_context(_connect(broker.port, sub))
        if setup is not None:
            setup(broker.port)
        pub = closing.enter_context(RawClient(broker.port))
        pub.connect("pub")
        wire = [pub.encode(p) + (PINGREQ if pinged else b"") for p in sequence]
        pub.send_raw(b"".join(wire) + (b"" if pinged else PINGREQ))
        answered = 0
        acks: list[Packet] = []  # what the publisher gets but PINGRESPs, in order
        acks_due = sum(1 for p in sequence if p.qos)
        while answered < (len(sequence) if pinged else 1) or len(acks) < acks_due:
            packet = pub.next()
            if isinstance(packet, Pingresp):
                answered += 1
            else:
                acks.append(packet)
        pub.send(_p(END, b""))
        got = {name: _collect(c) for name, c in clients.items()}
        got["pub"] = repr(acks).encode()
        return got


def _both(
    tmp_path: pathlib.Path, subs: list[Sub], seq: list[Publish], **kw: Any
) -> dict[str, bytes]:
    """``_run_once`` in runs and packet by packet: the same bytes (returned)."""
    in_runs = _run_once(tmp_path / "runs", subs, seq, False, **kw)
    one_by_one = _run_once(tmp_path / "one", subs, seq, True, **kw)
    assert in_runs == one_by_one
    return in_runs


SCENARIOS = {
    "v5 and 3.1.1 recipients, one with a small Maximum Packet Size": [
        Sub("v5"),
        Sub("v311", V311, ((b"t/+", 1),)),
        Sub("v31", V31, ((b"t/a", 0),)),
        Sub("small", connect={"maximum_packet_size": 60}),
    ],
    "no subscriber but the end topic's": [Sub("other", filters=((b"u/#", 0),))],
    "a subscription identifier": [
        Sub("v5"),
        Sub("sid", subscribe={"subscription_identifiers": (7,)}),
    ],
    "a recipient taking topic aliases": [
        Sub("v5"),
        Sub("alias", connect={"topic_alias_maximum": 4}),
    ],
    "recipients at QoS 0, 1 and 2": [
        Sub("q0"),
        Sub("q1", filters=((b"t/#", 1),)),
        Sub("q2", V311, ((b"t/+", 2),)),
    ],
    "a persistent session at QoS 1 (its copies stored first)": [
        Sub("v5"),
        Sub("keeper", filters=((b"t/#", 1),), connect={"session_expiry_interval": 600}),
    ],
    "a persistent session with a subscription identifier, beside one at QoS 1": [
        Sub("q1", filters=((b"t/#", 1),)),
        Sub(
            "keeper",
            filters=((b"t/+", 1),),
            connect={"session_expiry_interval": 600},
            subscribe={"subscription_identifiers": (9,)},
        ),
    ],
    "two persistent sessions (each message stored once for both)": [
        Sub("k1", filters=((b"t/#", 1),), connect={"session_expiry_interval": 600}),
        Sub("k2", V311, ((b"t/+", 1),), connect={"session_expiry_interval": 600}),
    ],
    "a shared group": [
        Sub("m1", filters=((b"$share/g/t/#", 0),)),
        Sub("m2", filters=((b"$share/g/t/#", 0),)),
        Sub("v5"),
    ],
}


@pytest.mark.parametrize("subs", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_a_chunk_in_runs_sends_what_packet_by_packet_sends(
    tmp_path: pathlib.Path, subs: list[Sub]
) -> None:
    in_runs = _both(tmp_path, subs, _sequence())
    assert all(len(in_runs[s.name]) > 100 for s in subs if s.name != "other")  # not just END


def test_a_stored_run_opening_ends_the_runs_that_acknowledge_at_once(
    tmp_path: pathlib.Path,
) -> None:
    # t/e's run forwards at once; t/s's second message opens a stored run, whose step
    # then waits: t/e's next messages must wait behind it, as on_publish would make them.
    seq = [_p(b"t/e", b"e0"), _p(b"t/e", b"e1"), _p(b"t/s", b"s0"), _p(b"t/s", b"s1", 1, 5)]
    seq += [_p(b"t/e", b"e2"), _p(b"t/s", b"s2", 1, 6), _p(b"t/e", b"e3")]
    subs = [
        Sub("v5"),
        Sub("keeper", filters=((b"t/s", 1),), connect={"session_expiry_interval": 600}),
    ]
    got = _both(tmp_path, subs, seq)
    v5 = [p.payload for p in Decoder(V5).feed(got["v5"]) if isinstance(p, Publish)]
    assert v5 == [b"e0", b"e1", b"s0", b"s1", b"e2", b"s2", b"e3", b""]


def test_the_qos0_queue_limit_drops_the_same_copies(tmp_path: pathlib.Path) -> None:
    # A small chunk (one segment, so one read and one round in both forms): past 16
    # copies in the round, a recipient's QoS 0 copies are dropped.
    subs = [Sub("v5"), Sub("v311", V311)]
    seq = [_p(b"t/a", b"%d" % i) for i in range(30)]
    in_runs = _both(tmp_path, subs, seq, sessions={"max_outbound_queue": 16})
    assert in_runs["v5"].count(b"\x00\x03t/a") == 16


ACL = """
topic readwrite end
topic readwrite t/a
topic readwrite t/r/#
topic read t/secret
pattern deny t/r/%c
"""


def test_the_acl_refuses_and_hides_the_same_messages(tmp_path: pathlib.Path) -> None:
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    # "pub" may not write t/secret, which "seer" may read. (A filter overlapping a denied
    # topic is refused at SUBSCRIBE: these are not.)
    seer = ((b"t/r/blind", 0), (b"t/a", 0), (b"t/secret", 0))
    subs = [Sub("seer", filters=seer), Sub("a", filters=((b"t/a", 0),))]
    seq = [_p(t, b"%d" % i) for t in (b"t/r/blind", b"t/secret", b"t/a") for i in range(5)]
    got = _both(tmp_path, subs, seq, auth={"allow_anonymous": True, "acl_file": str(acl)})
    assert got["seer"].count(b"t/r/blind") == 5
    assert got["a"].count(b"t/a") == 5
    assert b"t/secret" not in got["seer"]  # refused, each of them


def test_a_stream_captures_every_message_of_a_run(tmp_path: pathlib.Path) -> None:
    stored: list[int] = []

    def stream(port: int) -> None:
        js = JsClient(port)
        try:
            out = js.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["t.c.>"]})
            assert "error" not in out, out
        finally:
            js.close()

    def count(port: int) -> None:
        js = JsClient(port)
        try:
            stored.append(js.request("$JS.API.STREAM.INFO.S")["state"]["messages"])
        finally:
            js.close()

    subs = [Sub("v5")]
    # Turns: t/b's run opens before t/c/f's captured PUBLISHes, whose acknowledgement
    # steps then wait for their commit; t/b's later copies must wait behind them.
    seq = [_p(b"t/b", b"p0"), _p(b"t/b", b"p1")]
    seq += [_p(t, t[-1:] + b"%d" % i) for i in range(6) for t in (b"t/b", b"t/c/f")]
    seq += [_p(t, b"%d" % i) for t in (b"t/c/d", b"t/a", b"t/c/e") for i in range(6)]
    got = _both(tmp_path, subs, seq, setup=stream)
    assert got["v5"].index(b"f0") < got["v5"].index(b"b1") < got["v5"].index(b"f5")
    # The stream's count, read by a second pass through a broker on the same data.
    _run_once(tmp_path / "runs", subs, [], False, setup=count)
    _run_once(tmp_path / "one", subs, [], False, setup=count)
    assert stored == [18, 18]


# -- open_run on a real broker ---------------------------------------------------------------


def _conn(broker: Broker, client_id: str) -> ClientConnection:
    for conn in broker.connections:
        if conn.session is not None and conn.session.client_id == client_id:
            assert isinstance(conn, ClientConnection)
            return conn
    raise AssertionError(f"{client_id} is not connected")


async def _client(
    broker: Broker, name: str, filters: tuple[bytes, ...] = (), **props: Any
) -> SockClient:
    c = SockClient(broker, name, connect=Connect(V5, name, True, 0, properties=Properties(**props)))
    with trio.fail_after(5):
        assert isinstance(await c.next(), Connack)
    if filters:
        await c.send(Subscribe(1, tuple(Subscription(f, 0) for f in filters)))
        with trio.fail_after(5):
            assert isinstance(await c.next(), Suback)
    return c


def _open(broker: Broker, publisher: str, topic: bytes, qos: int = 0) -> Run | StoredRun | None:
    conn = _conn(broker, publisher)
    p = _p(topic, b"x", qos, 1 if qos else None)
    broker.hub.router.route(topic, 0, broker.hub.sessions.is_connected)  # as on_publish did
    return open_run(Inbound(conn, conn.out), p)


def test_open_run_groups_recipients_by_the_bytes_they_take(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        pub = await _client(broker, "pub")
        a = await _client(broker, "a", (b"t/#",))
        b = await _client(broker, "b", (b"t/+",))
        run = _open(broker, "pub", b"t/x")
        assert isinstance(run, Run)
        [(prefix, outs)] = run.plain
        assert prefix == b"\x00\x03t/x\x00"
        assert {id(o) for o in outs} == {id(_conn(broker, "a").out), id(_conn(broker, "b").out)}
        assert _open(broker, "pub", b"$SYS/x") is None  # a topic under $
        assert _open(broker, "pub", b"nobody") is not None  # no recipient: counters only
        for c in (pub, a, b):
            c.close()

    run_with_broker(tmp_path, body)


def _with_pub_and_r(
    tmp_path: pathlib.Path,
    check: Callable[[Broker, SockClient], Awaitable[None]],
    filters: tuple[bytes, ...] = (b"t/#",),
    **props: Any,
) -> None:
    """``check`` on a real broker with client "pub" connected and "r" (CONNECT
    properties ``props``) subscribed to ``filters`` at QoS 0."""

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        pub = await _client(broker, "pub")
        r = await _client(broker, "r", filters, **props)
        await check(broker, r)
        for c in (pub, r):
            c.close()

    run_with_broker(tmp_path, body)


@pytest.mark.parametrize(
    ("props", "filters", "reason"),
    [
        ({"topic_alias_maximum": 3}, (b"t/#",), "takes aliases"),
        ({}, (b"$share/g/t/#",), "shared group: a pick per message"),
    ],
)
def test_open_run_declines(
    tmp_path: pathlib.Path, props: dict[str, Any], filters: tuple[bytes, ...], reason: str
) -> None:
    async def check(broker: Broker, r: SockClient) -> None:
        assert _open(broker, "pub", b"t/x") is None, reason

    _with_pub_and_r(tmp_path, check, filters, **props)


def test_open_run_declines_a_subscription_identifier(tmp_path: pathlib.Path) -> None:
    async def check(broker: Broker, r: SockClient) -> None:
        await r.send(
            Subscribe(2, (Subscription(b"t/#", 0),), Properties(subscription_identifiers=(9,)))
        )
        with trio.fail_after(5):
            assert isinstance(await r.next(), Suback)
        assert _open(broker, "pub", b"t/x") is None

    _with_pub_and_r(tmp_path, check, ())


def test_open_run_declines_a_rate_limit(tmp_path: pathlib.Path) -> None:
    async def check(broker: Broker, r: SockClient) -> None:
        assert _open(broker, "pub", b"t/x") is not None
        limits = broker.config.limits.model_copy(update={"max_publish_rate": 10.0})
        broker.apply_config(broker.config.model_copy(update={"limits": limits}))
        assert _open(broker, "pub", b"t/x") is None

    _with_pub_and_r(tmp_path, check)


def test_open_run_declines_a_captured_topic_and_a_capture_hook(tmp_path: pathlib.Path) -> None:
    async def check(broker: Broker, r: SockClient) -> None:
        js = broker.jetstream
        assert js is not None
        js.capture.set_subjects((("t.c.>", "S"),))  # as a stream's creation does
        assert _open(broker, "pub", b"t/c/d") is None
        assert _open(broker, "pub", b"t/a") is not None
        broker.hub.capture = lambda msg, deliveries: ()  # the bridge's hook
        assert _open(broker, "pub", b"t/a") is None
        broker.hub.capture = None

    _with_pub_and_r(tmp_path, check)


def test_open_run_declines_a_topic_the_acl_refuses(tmp_path: pathlib.Path) -> None:
    async def check(broker: Broker, r: SockClient) -> None:
        assert _open(broker, "pub", b"t/w/r") is not None
        acl = tmp_path / "acl"
        acl.write_text("topic read t/#\npattern write t/w/%c\n")
        auth = broker.config.auth.model_copy(update={"acl_file": str(acl)})
        broker.apply_config(broker.config.model_copy(update={"auth": auth}))
        assert _open(broker, "pub", b"t/w/r") is None  # (its route is cached: _open)
        assert _open(broker, "pub", b"t/w/pub") is not None

    _with_pub_and_r(tmp_path, check)


class _Inside:
    """An internal recipient (as the bridge's export or a $SYS listener is)."""

    def deliver(self, msg: Any, qos: int, retain: bool, sub_ids: tuple[int, ...]) -> None:
        """Never called here: only open_run's refusal is checked."""


def test_open_run_declines_an_offline_session_and_an_internal_recipient(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        pub = await _client(broker, "pub")
        away = await _client(broker, "away", (b"t/off",), session_expiry_interval=600)
        away.close()
        await trio.testing.wait_all_tasks_blocked()
        assert not broker.hub.sessions.is_connected(_num(broker, "away"))
        assert _open(broker, "pub", b"t/off") is None  # its copies: the session's rules
        inside = _Inside()
        num = broker.hub.add_recipient(inside)
        broker.hub.subscribe_internal(num, b"t/in", 0)
        assert _open(broker, "pub", b"t/in") is None
        pub.close()

    run_with_broker(tmp_path, body)


def _num(broker: Broker, client_id: str) -> int:
    for session in broker.hub.sessions.by_num.values():
        if session.client_id == client_id:
            return session.num
    raise AssertionError(f"no session {client_id}")


def test_open_run_takes_qos1_unless_a_copy_is_stored_or_no_one_receives(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        pub = await _client(broker, "pub")
        q1 = await _client(broker, "q1")
        await q1.send(Subscribe(1, (Subscription(b"t/q", 1), Subscription(b"t/k", 1))))
        q0 = await _client(broker, "q0", (b"t/q",))
        keeper = await _client(broker, "keeper", session_expiry_interval=600)
        await keeper.send(Subscribe(1, (Subscription(b"t/k", 1),)))
        for c in (q1, keeper):
            with trio.fail_after(5):
                assert isinstance(await c.next(), Suback)
        run = _open(broker, "pub", b"t/q")
        assert isinstance(run, Run)
        assert run.qos1 is not None
        assert [s.client_id for s in run.qos1] == ["q1"]
        [(_, outs)] = run.plain_qos1  # QoS 0 copies of a QoS 1 message: q0's only
        assert [id(o) for o in outs] == [id(_conn(broker, "q0").out)]
        stored = _open(broker, "pub", b"t/k")  # keeper's QoS 1 copy is stored first
        assert isinstance(stored, Run)
        assert stored.qos1 is None
        # A QoS 1 run: a stored run, its messages in keeper's pending entries.
        kept = _open(broker, "pub", b"t/k", qos=1)
        assert isinstance(kept, StoredRun)
        [target] = kept.pend_index
        keeper_session = _conn(broker, "keeper").session
        assert keeper_session is not None
        assert kept.deliveries[target].client == keeper_session.num
        assert kept.subject.startswith("$MQTT.pend.")
        await keeper.send(Subscribe(2, (Subscription(b"t/2", 1),)))
        keeper2 = await _client(broker, "keeper2", session_expiry_interval=600)
        await keeper2.send(Subscribe(1, (Subscription(b"t/2", 1),)))
        for c in (keeper, keeper2):
            with trio.fail_after(5):
                assert isinstance(await c.next(), Suback)
        # Two persistent sessions: the message is stored once for both (on_publish's).
        both = _open(broker, "pub", b"t/2", qos=1)
        assert isinstance(both, Run)
        assert both.qos1 is None
        nobody = _open(broker, "pub", b"t/none")  # PUBACK 0x10: on_publish's
        assert isinstance(nobody, Run)
        assert nobody.qos1 is None
        for c in (pub, q1, q0, keeper, keeper2):
            c.close()

    run_with_broker(tmp_path, body)

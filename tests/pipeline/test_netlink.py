"""The ``url=`` reader's own MQTT 5 link (:mod:`pipeline.mqttwire` under
:class:`pipeline.netread.JsLink`) against a real broker: packed answers far larger than
one socket read come back whole and in order, credentials are sent, and every refusal
(CONNECT, a request denied by the ACL, a lost connection) is a clear NetReadError."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from broker.security.passwords import hash_password
from pipeline import batches, netread
from pipeline.mqttpub import BrokerAddress, Publisher
from tests.broker.harness import BrokerThread
from tests.security.conftest import start_broker  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(60)

ACL = """
user reader
topic readwrite #
topic readwrite $JS/#

user outsider
topic readwrite _INBOX/#
"""


@pytest.fixture
def broker(
    tmp_path: pathlib.Path,
    start_broker: Callable[[str], BrokerThread],  # noqa: F811
) -> BrokerThread:
    pw = tmp_path / "passwd"
    pw.write_text(
        "".join(
            f"{u}:{hash_password(u + '-pw', iterations=1000)}\n" for u in ("reader", "outsider")
        )
    )
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    return start_broker(
        '[[listeners]]\nbind = "127.0.0.1:0"\n'
        f'[auth]\nallow_anonymous = false\npassword_file = "{pw}"\nacl_file = "{acl}"\n'
    )


def test_large_packed_answers_arrive_whole(broker: BrokerThread) -> None:
    reader = BrokerAddress("127.0.0.1", broker.port, "reader", "reader-pw")
    link = netread.JsLink(reader)
    try:
        link.request("STREAM/CREATE/BIG", {"name": "BIG", "subjects": ["big.>"]})
    finally:
        link.close()
    pub = Publisher(reader)
    sent = [(f"big/d{i % 7}", b"%06d" % i + bytes([i % 251]) * 300) for i in range(3000)]
    try:
        for topic, payload in sent:
            pub.publish(topic, payload, qos=1)
        pub.flush()
    finally:
        pub.close()
    link = netread.JsLink(reader)
    try:
        # one ~1 MB answer: many socket reads
        got = [
            batches.records_batch("BIG", seqs, None, raw=raw)
            for seqs, raw in netread.scan(link, "BIG", 1, 3000, per_request=3000)
        ]
        link.request("STREAM/INFO/BIG")  # the link is still in step after them
    finally:
        link.close()
    assert [s for b in got for s in b.column("seq").to_pylist()] == list(range(1, 3001))
    assert [(t, p) for b in got for t, p in zip(*b.select(["topic", "payload"]).to_pydict().values(), strict=True)] == sent  # fmt: skip


def test_refusals_are_clear_errors(broker: BrokerThread) -> None:
    with pytest.raises(netread.NetReadError, match="refused the connection"):
        netread.JsLink(BrokerAddress("127.0.0.1", broker.port, "reader", "wrong"), timeout=10)
    outsider = netread.JsLink(
        BrokerAddress("127.0.0.1", broker.port, "outsider", "outsider-pw"), timeout=10
    )
    try:
        with pytest.raises(netread.NetReadError, match="refused a request"):
            outsider.request("STREAM/NAMES", {})
    finally:
        outsider.close()
    link = netread.JsLink(BrokerAddress("127.0.0.1", broker.port, "reader", "reader-pw"))
    broker.stop()
    with pytest.raises(netread.NetReadError, match="connection"):
        link.request("STREAM/NAMES", {})
    link.close()
    with pytest.raises(netread.NetReadError, match="cannot connect"):
        netread.JsLink(BrokerAddress("127.0.0.1", broker.port), timeout=5)


def test_malformed_packets_are_wire_errors() -> None:
    from pipeline.mqttwire import WireError, parse_props, parse_publish

    props = b"\x09\x00\x02ab" + b"\x26\x00\x01k\x00\x01v" + b"\x1f\x00\x02no"
    msg, pid = parse_publish(
        2, bytearray(b"\x00\x01t\x00\x07" + bytes([len(props)]) + props + b"xyz")
    )
    assert (msg.topic, pid, bytes(msg.payload)) == ("t", 7, b"xyz")
    assert (msg.props.correlation, msg.props.user, msg.props.reason) == (b"ab", (("k", "v"),), "no")
    for bad in (
        b"\x05\x09\x00\x09ab",
        b"\x02\x26\x00",
        b"\x01\x7f",
        b"\x03\x02\x00\x00\x00",
        b"\xff\xff\xff\xff\xff",
    ):
        with pytest.raises(WireError):
            parse_props(bytearray(bad), 0)
    with pytest.raises(WireError):
        parse_publish(0, bytearray(b"\x00\x09t"))
    with pytest.raises(WireError):
        parse_publish(2, bytearray(b"\x00\x01t\x00"))

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

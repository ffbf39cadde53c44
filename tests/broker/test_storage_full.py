"""A disk that fills up: the broker refuses what it cannot store and goes on.

The broker runs as a child process whose files may not grow past a limit (RLIMIT_FSIZE:
LMDB's page writes then fail with EFBIG, as on a full disk). A store commit that fails
must cost the publishers whose messages were in it an error — 0x80 for MQTT 5, a
disconnect without PUBACK for 3.1.1, so the client sends it again — and nothing else:
no crash, no acknowledged message lost, other clients unaffected, and once a subscriber
drains its queue the freed pages take new messages again.
"""

from __future__ import annotations

import itertools
import pathlib
import time

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Disconnect, Puback, Publish, Pubrec
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from store import Store
from store.readonly import ReadOnlyEnv
from tests.broker.harness import BrokerProcess, refused_at_start, serve_command
from tests.broker.rawclient import Closed, RawClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FILE_LIMIT = 1 << 20  # the store starts at ~70 KB
EXPIRY = Properties(session_expiry_interval=3600)
REFUSALS = 20  # refused publishes in a row before the filler stops
MAX_MESSAGES = 5_000


def payload(i: int) -> bytes:
    return b"%06d" % i + bytes(994)


def fill(port: int) -> tuple[list[int], int]:
    """QoS 1 publishes of 1 KB, one at a time, until ``REFUSALS`` in a row are refused:
    the indexes acknowledged with Success, and the number refused."""
    accepted: list[int] = []
    refused = 0
    with RawClient(port) as pub:
        pub.connect("filler")
        for i in range(MAX_MESSAGES):
            pub.publish(b"fill/x", payload(i), qos=1, packet_id=i % 0xFFFF + 1)
            ack = pub.expect(Puback)
            assert ack.packet_id == i % 0xFFFF + 1
            if ack.reason_code is ReasonCode.SUCCESS:
                assert not refused, "a message was accepted between refusals"
                accepted.append(i)
                continue
            assert ack.reason_code is ReasonCode.UNSPECIFIED_ERROR
            assert ack.properties.reason_string == "the broker could not store it"
            refused += 1
            if refused == REFUSALS:
                break
        if refused:  # QoS 2: the PUBREC carries the error and the exchange ends there
            pub.publish(b"fill/x", bytes(50_000), qos=2, packet_id=1)
            rec = pub.expect(Pubrec)
            assert (rec.packet_id, rec.reason_code) == (1, ReasonCode.UNSPECIFIED_ERROR)
        pub.send(Disconnect())
    return accepted, refused


def test_a_full_disk_refuses_publishes_and_the_broker_goes_on(tmp_path: pathlib.Path) -> None:
    broker = BrokerProcess(tmp_path / "data", file_size_limit=FILE_LIMIT)
    broker.start()
    try:
        port = broker.port
        # A persistent subscriber, offline: every QoS 1 message is stored until it returns.
        with RawClient(port) as keeper:
            keeper.connect("keeper", properties=EXPIRY)
            keeper.subscribe((b"fill/#", 1))
            keeper.send(Disconnect())

        accepted, refused = fill(port)
        assert refused == REFUSALS, "the store never filled up"
        assert len(accepted) > 300

        # A 3.1.1 publisher cannot be told: no PUBACK, the connection closes.
        with RawClient(port, version=ProtocolVersion.MQTT_3_1_1) as old:
            old.connect("old-client")
            old.publish(b"fill/x", bytes(50_000), qos=1, packet_id=1)
            with pytest.raises(Closed):
                old.next()

        # A burst in one chunk (a stored run: its messages share one step): each refused,
        # in order; a 3.1.1 one closes the connection without a PUBACK.
        with RawClient(port) as burst:
            burst.connect("burst")
            pubs = [Publish(b"fill/x", payload(i), 1, packet_id=i + 1) for i in range(10)]
            burst.send_raw(b"".join(burst.encode(p) for p in pubs))
            for i in range(10):
                ack = burst.expect(Puback)
                assert (ack.packet_id, ack.reason_code) == (i + 1, ReasonCode.UNSPECIFIED_ERROR)
                assert ack.properties.reason_string == "the broker could not store it"
        with RawClient(port, version=ProtocolVersion.MQTT_3_1_1) as old:
            old.connect("old-burst")
            pubs = [Publish(b"fill/x", payload(i), 1, packet_id=i + 1) for i in range(5)]
            old.send_raw(b"".join(old.encode(p) for p in pubs))
            with pytest.raises(Closed):
                old.next()

        # Traffic that needs no storage goes on meanwhile.
        with RawClient(port) as listener, RawClient(port) as talker:
            listener.connect("listener")
            listener.subscribe((b"chat/#", 0))
            talker.connect("talker")
            talker.publish(b"chat/a", b"still here")
            got = listener.expect(Publish)
            assert (got.topic, got.payload) == (b"chat/a", b"still here")

        # Every acknowledged message reaches the subscriber, once and in order; its
        # acknowledgements free their pages.
        with RawClient(port) as keeper:
            connack = keeper.connect("keeper", clean_start=False, properties=EXPIRY)
            assert connack.session_present
            for i in accepted:
                msg = keeper.expect_publish()
                assert msg.payload == payload(i)
            assert keeper.nothing_within(0.5)

            # The deletions that did not fit are retried each second, one commit each,
            # until the space is back: new messages are stored again.
            first = wait_until_accepted(port, deadline=time.monotonic() + 30)
            assert keeper.expect_publish().payload == payload(first)
            # One accepted message means some space is back, not all of it: the retries
            # go on a deletion per commit each second. Wait for the last one.
            wait_until_deleted(tmp_path / "data", deadline=time.monotonic() + 30)
            again, refused = fill_some(port, 50)
            assert refused == 0
            for i in again:
                assert keeper.expect_publish().payload == payload(i)
            assert keeper.nothing_within(1.5)  # the last acknowledgements are committed
            keeper.send(Disconnect())
    finally:
        code = broker.terminate()
    out = "".join(broker.output)
    assert code == 0, out
    with Store.open(tmp_path / "data") as st:
        # Every acknowledged delivery was deleted in the end.
        assert st.stream_state("$MQTT_pend").messages == 0
        assert st.stream_state("$MQTT_msgs").messages == 0
    assert "could not be deleted" not in out
    assert "a store write failed, nothing of it is stored" in out
    assert "store writes succeed again" in out
    assert "Traceback" in out  # the first failure is logged with its cause ...
    assert out.count("Traceback") == 1  # ... once: not one per refused message


def wait_until_deleted(data: pathlib.Path, deadline: float) -> None:
    """Until ``$MQTT_pend`` is empty (every acknowledged delivery deleted), read from a
    read-only environment beside the running broker."""
    with ReadOnlyEnv(data) as ro:
        sid = ro.streams()["$MQTT_pend"]
        while ro.messages(sid, limit=1):
            assert time.monotonic() < deadline, "acknowledged deliveries were never deleted"
            time.sleep(0.1)


def wait_until_accepted(port: int, deadline: float) -> int:
    """Publish one 1 KB QoS 1 message every 0.2 s until one is accepted: its index."""
    with RawClient(port) as pub:
        pub.connect("prober")
        for attempt in itertools.count():
            assert time.monotonic() < deadline, "the store never took new messages again"
            i = 2 * MAX_MESSAGES + attempt
            pub.publish(b"fill/x", payload(i), qos=1, packet_id=attempt % 0xFFFF + 1)
            if pub.expect(Puback).reason_code is ReasonCode.SUCCESS:
                pub.send(Disconnect())
                return i
            time.sleep(0.2)
    raise AssertionError("unreachable")


def fill_some(port: int, n: int) -> tuple[list[int], int]:
    """``n`` QoS 1 publishes of 1 KB: the indexes accepted and the number refused."""
    accepted: list[int] = []
    refused = 0
    with RawClient(port) as pub:
        pub.connect("filler")
        for i in range(MAX_MESSAGES, MAX_MESSAGES + n):
            pub.publish(b"fill/x", payload(i), qos=1, packet_id=i % 0xFFFF + 1)
            ack = pub.expect(Puback)
            if ack.reason_code is ReasonCode.SUCCESS:
                accepted.append(i)
            else:
                refused += 1
        pub.send(Disconnect())
    return accepted, refused


@pytest.mark.parametrize(
    ("limit", "cause"),
    [
        (16_384, "cannot open the store in"),  # LMDB's lock file alone is 32,896 bytes
        (49_152, "writing the store in"),  # the broker's streams do not fit
    ],
)
def test_a_disk_full_at_start_is_one_line_and_exit_1(
    tmp_path: pathlib.Path, limit: int, cause: str
) -> None:
    """No room for the store: refused at start with the cause in one line, exit status 1
    (it was trio's exception-group traceback)."""
    line = refused_at_start(serve_command(tmp_path / "data", file_size_limit=limit))
    assert line.startswith(f"jetmq: cannot start: {cause} {tmp_path / 'data'}")

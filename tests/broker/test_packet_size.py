"""Maximum Packet Size inbound: the default takes what a mosquitto user sends, and every
refusal (DISCONNECT 0x95) is logged once, naming the client id and the size."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from broker.config import MqttConfig
from broker.mqtt.packets import Publish
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.wire import encode_varint
from tests.broker.harness import BrokerProcess, BrokerThread
from tests.broker.pahoclient import Paho
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)

DEFAULT = 16 * 1024 * 1024


def test_the_default_is_16_mib() -> None:
    assert MqttConfig().max_packet_size == DEFAULT


def _publish_of_size(size: int) -> Publish:
    """A v5 QoS 0 PUBLISH to ``t`` whose encoding is ``size`` bytes long."""
    # 1 (type) + 4 (remaining length, size > 2 MiB) + 2 + 1 (topic) + 1 (no properties)
    return Publish(b"t", b"p" * (size - 9))


def test_default_limit_at_the_limit_and_one_byte_more(broker: BrokerThread) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("limit-sub")
        sub.subscribe((b"t", 0))
        pub.connect("limit-pub")
        fits = _publish_of_size(DEFAULT)
        assert len(pub.encode(fits)) == DEFAULT
        pub.send_raw(pub.encode(fits))
        assert sub.expect_publish(timeout=30).payload == fits.payload
        # One byte more: refused from the fixed header, before the body is sent.
        pub.send_raw(bytes([0x30]) + encode_varint(DEFAULT + 1 - 5))
        disconnect = pub.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PACKET_TOO_LARGE


def test_a_few_megabytes_pass_under_the_default(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker()
    sub = Paho(broker.port, "mb-sub")
    pub = Paho(broker.port, "mb-pub")
    payload = bytes(range(256)) * (5 * 4096)  # 5 MiB
    try:
        sub.connect()
        sub.subscribe("mb/t", qos=1)
        pub.connect()
        info = pub.publish("mb/t", payload, qos=1)
        assert info.is_published()
        message = sub.get(timeout=30)
        assert message.payload == payload
    finally:
        pub.disconnect()
        sub.disconnect()


def test_each_refusal_is_logged_once_with_the_client_id_and_size(
    tmp_path: pathlib.Path,
) -> None:
    config = tmp_path / "jetmq.toml"
    config.write_text("[mqtt]\nmax_packet_size = 4096\n")
    broker = BrokerProcess(tmp_path / "data", config=config)
    broker.start()
    try:
        with RawClient(broker.port) as c:
            c.connect("too-big-7")
            data = c.encode(Publish(b"t", b"y" * 5000))
            c.send_raw(data)
            disconnect = c.expect_disconnect()
            assert disconnect is not None
            assert disconnect.reason_code is ReasonCode.PACKET_TOO_LARGE
        line = broker.wait_for_output("refused a packet")
        # One log record: time, level and logger first (log.level's handler), then this.
        assert line.strip().endswith(
            f" WARNING jetmq.client: client 'too-big-7': refused a packet of {len(data)} bytes,"
            " over mqtt.max_packet_size = 4096 (0x95)"
        )
        # Before CONNECT there is no client id yet: the peer's address instead.
        with RawClient(broker.port) as c:
            c.send_raw(bytes([0x10]) + encode_varint(5000))  # a CONNECT of 5003 bytes
            c.wait_closed()
            port = c.sock.getsockname()[1]
        line = broker.wait_for_output("refused a packet")
        assert line.strip().endswith(
            " WARNING jetmq.client: a client before its CONNECT"
            f" (from 127.0.0.1 port {port}): refused a packet"
            " of 5003 bytes, over mqtt.max_packet_size = 4096 (0x95)"
        )
    finally:
        assert broker.terminate() == 0
    assert sum("refused a packet" in line for line in broker.output) == 2

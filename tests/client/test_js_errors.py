"""JetStream refusals and errors as the client surfaces them (typed, with the wire's
codes), and the blocking facade's JetStream context."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import anyio
import pytest

from broker.config import load_config
from broker.mqtt.reason_codes import ReasonCode
from client import Client, JetStreamError, PublishError
from client.errors import (
    BadRequestError,
    NoMessageFoundError,
    ServiceUnavailableError,
    StatusError,
)
from client.sync import Client as SyncClient
from store.models import ConsumerConfig
from tests.broker.harness import BrokerThread
from tests.client.conftest import needs_jetstream

pytestmark = [pytest.mark.timeout(60), needs_jetstream]


@pytest.mark.anyio
async def test_api_request_without_response_topic_is_refused_0x83(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            with pytest.raises(PublishError) as exc:
                await c.publish("$JS/API/INFO", b"", 1)
            assert exc.value.reason_code is ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR


@pytest.mark.anyio
async def test_unknown_api_subject_is_a_bad_request(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            with pytest.raises(BadRequestError) as exc:
                await c.jetstream().api.call("NO/SUCH/THING")
            assert (exc.value.code, exc.value.err_code) == (400, 10003)


@pytest.mark.anyio
@pytest.mark.parametrize("json_ack", [False, True])
async def test_capture_refusals_carry_the_jetstream_error(server: str, json_ack: bool) -> None:
    with anyio.fail_after(20):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="DN", subjects=["dn.>"], max_msgs=1, discard="new")
            await js.add_stream(name="SZ", subjects=["sz.>"], max_msg_size=10)
            await js.publish("dn/1", b"x", json_ack=json_ack)
            with pytest.raises(ServiceUnavailableError) as full:
                await js.publish("dn/2", b"x", json_ack=json_ack)
            assert (full.value.code, full.value.err_code) == (503, 10077)
            assert full.value.description == "maximum messages exceeded"
            with pytest.raises(JetStreamError) as big:
                await js.publish("sz/1", b"x" * 100, json_ack=json_ack)
            assert (big.value.code, big.value.err_code) == (400, 10054)
            assert big.value.description == "message size exceeds maximum allowed"


@pytest.mark.anyio
async def test_the_puback_reason_code_of_a_full_stream_is_0x97(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            await c.jetstream().add_stream(name="Q", subjects=["q"], max_msgs=1, discard="new")
            await c.publish("q", b"1", 1)
            with pytest.raises(PublishError) as exc:
                await c.publish("q", b"2", 1)
            assert exc.value.reason_code is ReasonCode.QUOTA_EXCEEDED
            assert exc.value.reason == "maximum messages exceeded"


@pytest.mark.anyio
async def test_pull_from_a_push_consumer_is_a_409_status(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="PP", subjects=["pp"])
            cfg = ConsumerConfig(durable_name="push", deliver_subject="somewhere.else")
            await js.add_consumer("PP", cfg)
            inbox = await c.open_inbox()
            await c.publish("$JS/API/CONSUMER/MSG/NEXT/PP/push", b"", 1, response_topic=inbox.topic)
            status = await inbox.next(5)
            assert status.header("Status") == "409"
            # and through the pull subscription object, as a typed error
            from client.jsapi import Api
            from client.pull import PullSubscription

            sub = PullSubscription(Api(c), "PP", "push", await c.open_inbox(), created=False)
            with pytest.raises(StatusError) as exc:
                await sub.fetch(1, timeout=2)
            assert exc.value.status == 409


@pytest.fixture
def js_off_server(tmp_path: pathlib.Path) -> Iterator[str]:
    config = load_config(
        None,
        {
            "listener": {"listen": ["127.0.0.1:0"]},
            "storage": {"data_dir": str(tmp_path / "off")},
            "jetstream": {"enabled": False},
        },
    )
    b = BrokerThread(config)
    b.start()
    yield f"mqtt://127.0.0.1:{b.port}"
    b.stop()


@pytest.mark.anyio
async def test_jetstream_disabled_is_an_error_not_a_timeout(js_off_server: str) -> None:
    with anyio.fail_after(10):
        async with Client(js_off_server) as c:
            with pytest.raises(JetStreamError, match=r"\$JS/API/STREAM/NAMES"):
                await c.jetstream(timeout=30).stream_names()


def test_blocking_jetstream(server: str) -> None:
    with SyncClient(server) as c:
        js = c.jetstream()
        js.add_stream(name="SY", subjects=["sy.>"])
        acks = [js.publish(f"sy/{i}", f"m{i}") for i in range(3)]
        assert [a.seq for a in acks] == [1, 2, 3]
        psub = js.pull_subscribe("sy.>", durable="d")
        msgs = psub.fetch(3, timeout=5)
        assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
        for m in msgs:
            m.ack_sync()
        assert psub.consumer_info().num_ack_pending == 0
        assert js.stream_info("SY").state.messages == 3
        assert js.get_msg("SY", 2).data == b"m1"
        assert js.purge_stream("SY") == 3
        assert js.delete_stream("SY")


@pytest.mark.anyio
async def test_pull_from_a_deleted_consumer_is_a_jetstream_error(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="GONE", subjects=["gone"])
            psub = await js.pull_subscribe("gone", durable="d")
            await js.delete_consumer("GONE", "d")
            with pytest.raises(JetStreamError, match="pull from GONE/d refused"):
                await psub.fetch(1, timeout=2)


@pytest.mark.anyio
async def test_direct_get(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="DG", subjects=["dg.>"], allow_direct=True)
            await js.add_stream(name="NODG", subjects=["nodg"])
            await js.publish("dg/a", b"one", headers={"h": "1"})
            await js.publish("dg/a", b"two")
            msg = await js.get_msg("DG", 1, direct=True)
            assert (msg.subject, msg.seq, msg.data, msg.headers) == (
                "dg.a",
                1,
                b"one",
                (("h", "1"), ("Mqtt-Qos", "1")),
            )
            assert msg.time.endswith("Z")
            last = await js.get_msg("DG", subject="dg.a", direct=True)
            assert (last.seq, last.data) == (2, b"two")
            with pytest.raises(NoMessageFoundError):
                await js.get_msg("DG", 99, direct=True)
            with pytest.raises(JetStreamError) as exc:
                await js.get_msg("NODG", 1, direct=True)
            assert exc.value.code == 503

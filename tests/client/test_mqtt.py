"""The MQTT client against the real broker, under asyncio and under trio."""

from __future__ import annotations

import anyio
import pytest

from broker.mqtt.packets import Will
from broker.mqtt.reason_codes import ReasonCode
from client import Client, ConnectError, NoRespondersError
from client.errors import ConnectionClosedError
from client.subscription import topic_matches
from client.url import parse_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_publish_subscribe_qos_0_1_2_round_trip(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as sub_client, Client(server) as pub_client:
            sub = await sub_client.subscribe("t/+", qos=2)
            for qos in (0, 1, 2):
                result = await pub_client.publish(
                    "t/x", f"m{qos}", qos, user_properties=[("k", str(qos))]
                )
                assert result.reason_code is ReasonCode.SUCCESS
                msg = await sub.next(5)
                assert (msg.topic, msg.payload, msg.qos) == ("t/x", f"m{qos}".encode(), qos)
                assert msg.header("k") == str(qos)


async def test_qos2_is_delivered_exactly_once(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as a, Client(server) as b:
            sub = await a.subscribe("once", qos=2)
            for i in range(20):
                await b.publish("once", str(i), 2)
            got = [int((await sub.next(5)).payload) for _ in range(20)]
            assert got == list(range(20))
            with pytest.raises(TimeoutError):
                await sub.next(0.2)


async def test_no_subscribers_is_reported_as_puback_0x10(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            result = await c.publish("nobody/home", b"x", 1)
            assert result.reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS


async def test_request_response_with_correlation_data(server: str) -> None:
    async def responder(c: Client, ready: anyio.Event) -> None:
        async with await c.subscribe("svc/echo", qos=1) as sub:
            ready.set()
            msg = await sub.next(5)
            assert msg.response_topic is not None
            assert msg.correlation_data
            await c.respond(msg, b"echo:" + msg.payload)

    with anyio.fail_after(10):
        async with Client(server) as a, Client(server) as b, anyio.create_task_group() as tg:
            ready = anyio.Event()
            tg.start_soon(responder, a, ready)
            await ready.wait()
            answer = await b.request("svc/echo", b"hi", 5)
            assert answer.payload == b"echo:hi"


async def test_request_without_responders_fails_fast(server: str) -> None:
    with anyio.fail_after(5):
        async with Client(server) as c:
            with pytest.raises(NoRespondersError):
                await c.request("svc/none", b"?", 30)


async def test_unsubscribe_stops_delivery_and_ends_iteration(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            sub = await c.subscribe("u/#", qos=1)
            await c.publish("u/1", b"a", 1)
            assert (await sub.next(5)).payload == b"a"
            await sub.unsubscribe()
            assert [m async for m in sub] == []
            result = await c.publish("u/1", b"b", 1)
            assert result.reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS


async def test_keep_alive_pings_keep_the_connection(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server, keep_alive=1) as c:
            await anyio.sleep(2.5)  # the pinger must have kept it alive for > 1.5 x keep alive
            assert c.is_connected
            await c.publish("ka", b"x", 1)


async def test_session_expiry_keeps_subscriptions_across_connections(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server, client_id="persist", session_expiry=60) as c:
            await c.subscribe("kept", qos=1)
        async with Client(server) as p:
            await p.publish("kept", b"while away", 1)
        async with Client(server, client_id="persist", clean_start=False, session_expiry=60) as c:
            assert c.connack is not None
            assert c.connack.session_present
            sub = await c.subscribe("kept", qos=1)
            assert (await sub.next(5)).payload == b"while away"


async def test_broker_down_is_a_connect_error() -> None:
    with anyio.fail_after(10):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()
        with pytest.raises(ConnectError, match=r"cannot connect to mqtt://127\.0\.0\.1"):
            async with Client(f"mqtt://127.0.0.1:{port}"):
                pass


async def test_calls_after_close_raise_connection_closed(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as c:
            sub = await c.subscribe("x")
        with pytest.raises(ConnectionClosedError):
            await c.publish("x", b"y", 1)
        with pytest.raises(ConnectionClosedError):
            await sub.next(1)


@pytest.mark.parametrize(
    ("flt", "topic", "ok"),
    [
        ("a/+", "a/b", True),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("+/b", "a/b/c", False),
        ("#", "$SYS/x", False),
        ("$share/g/a/+", "a/b", True),
    ],
)
def test_topic_matching(flt: str, topic: str, ok: bool) -> None:
    assert topic_matches(flt, topic) is ok


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mqtt://h:1", ("h", 1)),
        ("h", ("h", 1883)),
        ("127.0.0.1:9", ("127.0.0.1", 9)),
        ("mqtt://[::1]:2", ("::1", 2)),
    ],
)
def test_parse_server(text: str, expected: tuple[str, int]) -> None:
    assert parse_server(text) == expected


@pytest.mark.parametrize("bad", ["http://h:1", "mqtt://h:99999", "mqtt://:1"])
def test_parse_server_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="server"):
        parse_server(bad)


async def test_will_is_published_when_the_connection_breaks(server: str) -> None:
    with anyio.fail_after(10):
        async with Client(server) as watcher:
            sub = await watcher.subscribe("wills/#", qos=1)
            will = Will(b"wills/c1", b"gone", qos=1)
            async with Client(server, client_id="c1", will=will) as c:
                assert c._stream is not None
                await c._stream.aclose()  # no DISCONNECT: the broker must send the will
                await c.wait_closed()
            msg = await sub.next(5)
            assert (msg.topic, msg.payload) == ("wills/c1", b"gone")

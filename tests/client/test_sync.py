"""The blocking facade (``client.sync``), on both portal backends."""

from __future__ import annotations

import threading

import pytest

from broker.mqtt.reason_codes import ReasonCode
from client.errors import ConnectError
from client.sync import Client

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_blocking_publish_subscribe_request(server: str, backend: str) -> None:
    with Client(server, backend=backend) as a, Client(server, backend=backend) as b:
        sub = a.subscribe("s/#", qos=1)
        assert b.publish("s/1", b"one", 1).reason_code is ReasonCode.SUCCESS
        b.publish("s/2", b"two", 2)
        assert [sub.next(5).payload for _ in range(2)] == [b"one", b"two"]

        svc = a.subscribe("svc", qos=1)

        def answer() -> None:
            req = svc.next(5)
            assert req.response_topic is not None
            a.publish(req.response_topic, b"pong", 1, correlation_data=req.correlation_data)

        t = threading.Thread(target=answer)
        t.start()
        assert b.request("svc", b"ping", 5).payload == b"pong"
        t.join(5)
        sub.unsubscribe()
        assert list(sub) == []


def test_blocking_connect_error_leaves_no_thread_behind() -> None:
    before = threading.active_count()
    with pytest.raises(ConnectError):
        Client("mqtt://127.0.0.1:1", connect_timeout=5)
    assert threading.active_count() == before

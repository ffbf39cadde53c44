"""A reload (SIGHUP -> ``Broker.apply_config``) that changes ``[bridge]``: the new rules
take effect without a restart, nothing PUBACKed for a ``jetstream`` forward is lost while
the bridges are swapped, and a bridge can be removed and added. Real nats-server, jetmq
in a thread, paho clients."""

from __future__ import annotations

import pathlib
import signal
import threading
from typing import Any

import pytest

from tests.bridge.harness import (
    BridgedBroker,
    NatsClient,
    bridge_config,
    end_process,
    forwards,
    serve_process,
    wait_for,
)
from tests.broker.pahoclient import Paho
from tests.natsserver import NatsServer

pytestmark = pytest.mark.timeout(120)


def reload(b: BridgedBroker, data: pathlib.Path, bridge: dict[str, Any] | None) -> None:
    """Apply a configuration whose only change is ``[bridge]`` (None: no bridge)."""
    new = bridge_config(data, bridge)

    def apply() -> list[str]:
        assert b.broker is not None
        return b.broker.apply_config(new)

    assert b.call(apply) == []  # nothing needs a restart


def bridge_of(b: BridgedBroker) -> Any:
    def get() -> Any:
        assert b.broker is not None
        return b.broker.bridge

    return b.call(get)


def test_forward_and_import_rules_change_on_reload(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "data"
    first = {
        "servers": [nats_server.url],
        "name": "edge-1",
        "forward": [{"filter": "a/#"}],
        "import": [{"subject": "in1.>"}],
    }
    b = BridgedBroker(bridge_config(data, first)).start()
    try:
        wait_for(lambda: bool(b.state()["connected"]))
        got_a, got_b = nc.subscribe("a.>"), nc.subscribe("b.>")
        sub = Paho(b.port, "reload-sub")
        sub.connect()
        sub.subscribe("in1/#", qos=1)
        sub.subscribe("in2/#", qos=1)
        pub = Paho(b.port, "reload-pub")
        pub.connect()
        pub.publish("a/1", "before", qos=1)
        assert got_a.get(timeout=10).data == b"before"
        nc.publish("in1.x", b"imported before")
        assert sub.get().payload == b"imported before"

        old = bridge_of(b)
        second = {**first, "forward": [{"filter": "b/#"}], "import": [{"subject": "in2.>"}]}
        reload(b, data, second)
        wait_for(lambda: bridge_of(b) is not old and bool(b.state()["connected"]))
        wait_for(lambda: not old.state.snapshot()["connected"])  # the old link closed

        pub.publish("a/2", "not forwarded any more", qos=1)
        pub.publish("b/1", "forwarded now", qos=1)
        assert got_b.get(timeout=10).data == b"forwarded now"
        assert got_a.empty()
        nc.publish("in1.x", b"not imported any more")
        nc.publish("in2.x", b"imported now")
        assert sub.get().payload == b"imported now"
        assert sub.none_within(0.5)
        pub.disconnect()
        sub.disconnect()
    finally:
        b.stop()


def test_no_puback_is_lost_for_a_jetstream_forward_across_reloads(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    """A publisher sends QoS 1 messages without pause while the bridge is swapped three
    times: every message it got a PUBACK for is in the NATS stream, once."""
    nc.run(nc.js.add_stream(name="SENS", subjects=["sensors.>"]))
    data = tmp_path / "data"
    rule = {"filter": "sensors/#", "mode": "jetstream", "min_qos": 1}
    config = {"servers": [nats_server.url], "name": "edge-1", "forward": [rule]}
    b = BridgedBroker(bridge_config(data, config)).start()
    acked: list[int] = []
    stop = threading.Event()

    def publish() -> None:
        pub = Paho(b.port, "steady-pub")
        pub.connect()
        i = 0
        while not stop.is_set() and i < 5000:
            pub.publish(f"sensors/{i % 5}", str(i), qos=1)  # waits for the PUBACK
            acked.append(i)
            i += 1
        pub.disconnect()

    try:
        wait_for(lambda: bool(b.state()["connected"]))
        t = threading.Thread(target=publish)
        t.start()
        for n in range(3):
            want = 100 * (n + 1)
            wait_for(lambda: len(acked) > want)  # noqa: B023 (waited for at once)
            extra = [{"filter": f"unused{n}/#"}]  # a changed section: a new bridge
            reload(b, data, {**config, "forward": [rule, *extra]})
        wait_for(lambda: len(acked) > 400)
        stop.set()
        t.join(30)
        assert not t.is_alive()
        wait_for(lambda: nc.run(nc.js.stream_info("SENS")).state.messages >= len(acked), 60)
        wait_for(lambda: b.state()["pending"] == 0)
        info = nc.run(nc.js.stream_info("SENS"))
        assert info.state.messages == len(acked)  # NATS dropped the re-sent ones by id
        got = {int(nc.run(nc.js.get_msg("SENS", seq)).data) for seq in range(1, len(acked) + 1)}
        assert got == set(acked)
    finally:
        stop.set()
        b.stop()


def test_a_bridge_removed_and_added_by_reload(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    data = tmp_path / "data"
    config = {"servers": [nats_server.url], "name": "edge-1", "forward": [{"filter": "x/#"}]}
    b = BridgedBroker(bridge_config(data, config)).start()
    try:
        wait_for(lambda: bool(b.state()["connected"]))
        got = nc.subscribe("x.>")
        reload(b, data, None)
        wait_for(lambda: bridge_of(b) is None)
        pub = Paho(b.port, "rm-pub")
        pub.connect()
        pub.publish("x/1", "no bridge", qos=1)
        reload(b, data, config)
        wait_for(lambda: bridge_of(b) is not None and bool(b.state()["connected"]))
        pub.publish("x/2", "bridged again", qos=1)
        assert got.get(timeout=10).data == b"bridged again"
        assert got.empty()
        pub.disconnect()
    finally:
        b.stop()


@pytest.mark.slow
def test_sighup_applies_new_bridge_rules(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    """The real path: ``jetmq serve --config`` and SIGHUP after the file changed."""
    cfg = tmp_path / "jetmq.toml"

    def write(filter_: str) -> None:
        cfg.write_text(
            f'[listener]\nlisten = ["127.0.0.1:0"]\n[storage]\ndata_dir = "{tmp_path / "d"}"\n'
            f'[bridge]\nservers = ["{nats_server.url}"]\nname = "edge-1"\n'
            f'[[bridge.forward]]\nfilter = "{filter_}"\n'
        )

    write("first/#")
    proc, port = serve_process(cfg)
    try:
        assert proc.stdout is not None
        write("second/#")
        proc.send_signal(signal.SIGHUP)
        for line in proc.stdout:
            if "SIGHUP: configuration" in line:
                assert line.strip() == "jetmq: SIGHUP: configuration reloaded", line
                break
        # the new bridge connects to NATS in the background: forwards() retries
        assert forwards(port, nc, "second/x", "second.x") == b"hello"
    finally:
        end_process(proc)

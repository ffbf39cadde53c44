"""Reloads of ``[bridge]`` beyond its rules: changed ``servers`` move the link to the new
server; a broken section (SIGHUP to ``jetmq serve --config``) prints that nothing was
reloaded, logs key, line and value, and the running bridge keeps its old rules. Real
nats-server, paho."""

from __future__ import annotations

import pathlib
import signal

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
from tests.bridge.test_reload import bridge_of, reload
from tests.broker.pahoclient import Paho
from tests.natsserver import NatsServer

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow
def test_a_broken_bridge_section_keeps_the_running_bridge(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    cfg = tmp_path / "jetmq.toml"
    head = (
        f'[listener]\nlisten = ["127.0.0.1:0"]\n[storage]\ndata_dir = "{tmp_path / "d"}"\n'
        f'[bridge]\nservers = ["{nats_server.url}"]\nname = "edge-1"\n'
    )
    cfg.write_text(head + '[[bridge.forward]]\nfilter = "first/#"\n')
    proc, port = serve_process(cfg)
    try:
        assert proc.stdout is not None
        assert forwards(port, nc, "first/a", "first.a") == b"hello"
        cfg.write_text(head + '[[bridge.forward]]\nfilter = "second/#"\nmode = "bogus"\n')
        proc.send_signal(signal.SIGHUP)
        seen: list[str] = []
        for line in proc.stdout:
            seen.append(line)
            if "SIGHUP: configuration" in line:
                break
        assert seen[-1].strip() == "jetmq: SIGHUP: configuration not reloaded (see the log)"
        text = "".join(seen)
        assert "reload failed, the configuration in use is kept" in text
        assert "jetmq.toml: bridge.forward[0].mode (line 10): 'bogus': " in text, text
        # The running bridge still has its old rule.
        assert forwards(port, nc, "first/b", "first.b") == b"hello"
    finally:
        end_process(proc)


def test_changed_servers_move_the_link(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    """``servers`` changed by a reload: the bridge reconnects to the new server, the old
    link closes, and forwards and imports go through the new server only."""
    other = NatsServer(tmp_path / "nats2").start()
    other_nc = NatsClient(other.url)
    data = tmp_path / "data"
    first = {
        "servers": [nats_server.url],
        "name": "edge-1",
        "forward": [{"filter": "a/#"}],
        "import": [{"subject": "in.>"}],
    }
    b = BridgedBroker(bridge_config(data, first)).start()
    try:
        wait_for(lambda: bool(b.state()["connected"]))
        assert b.state()["server"] == nats_server.url.removeprefix("nats://")
        got_old, got_new = nc.subscribe("a.>"), other_nc.subscribe("a.>")
        sub = Paho(b.port, "move-sub")
        sub.connect()
        sub.subscribe("in/#", qos=1)
        pub = Paho(b.port, "move-pub")
        pub.connect()

        old = bridge_of(b)
        reload(b, data, {**first, "servers": [other.url]})
        wait_for(lambda: bridge_of(b) is not old and bool(b.state()["connected"]))
        wait_for(lambda: not old.state.snapshot()["connected"])
        assert b.state()["server"] == other.url.removeprefix("nats://")

        pub.publish("a/1", "to the new server", qos=1)
        assert got_new.get(timeout=10).data == b"to the new server"
        assert got_old.empty()
        nc.publish("in.x", b"old server: not imported")
        other_nc.publish("in.x", b"new server: imported")
        assert sub.get().payload == b"new server: imported"
        assert sub.none_within(0.5)
        pub.disconnect()
        sub.disconnect()
    finally:
        b.stop()
        other_nc.close()
        other.kill9()


def test_a_reload_without_bridge_changes_keeps_the_bridge(
    nats_server: NatsServer, nc: NatsClient, tmp_path: pathlib.Path
) -> None:
    """A reload that changes other sections only leaves the running bridge (and its NATS
    connection) alone: no swap, no resend."""
    data = tmp_path / "data"
    config = {"servers": [nats_server.url], "name": "edge-1", "forward": [{"filter": "a/#"}]}
    b = BridgedBroker(bridge_config(data, config)).start()
    try:
        wait_for(lambda: bool(b.state()["connected"]))
        got = nc.subscribe("a.>")
        old = bridge_of(b)
        new = bridge_config(data, config, max_queued_messages=500)

        def apply() -> list[str]:
            assert b.broker is not None
            return b.broker.apply_config(new)

        assert b.call(apply) == []
        pub = Paho(b.port, "keep-pub")
        pub.connect()
        pub.publish("a/1", "same bridge", qos=1)
        assert got.get(timeout=10).data == b"same bridge"
        assert bridge_of(b) is old
        assert old.state.snapshot()["connected"]
        pub.disconnect()
    finally:
        b.stop()

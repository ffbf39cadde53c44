"""The ``jetmq`` console script as a user runs it."""

from __future__ import annotations

import pathlib
import signal
import socket
import subprocess
import sys

import pytest

from broker import __version__
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Puback
from tests.broker.harness import BrokerProcess, refused_at_start, serve_command
from tests.broker.pahoclient import Paho
from tests.broker.rawclient import RawClient


def _jetmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    out = _jetmq("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"jetmq {__version__}"


def test_help_lists_serve() -> None:
    out = _jetmq("--help")
    assert out.returncode == 0
    assert "serve" in out.stdout
    assert "usage: jetmq" in out.stdout


def test_serve_starts_and_stops_cleanly_on_sigterm(tmp_path: pathlib.Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    assert broker.port > 0
    assert broker.terminate() == 0
    assert (tmp_path / "data").is_dir()


def test_serve_refuses_a_bad_config_naming_the_key(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j.toml"
    path.write_text("[storage]\nsync = 'never'\n")
    out = _jetmq("serve", "--config", str(path))
    assert out.returncode == 1
    assert "storage.sync (line 2)" in out.stderr


def test_check_config_reports_errors_with_the_key(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j.toml"
    path.write_text("[mqtt]\nmaximum_qos = 7\n")
    out = _jetmq("check-config", "--config", str(path))
    assert out.returncode == 1
    assert "mqtt.maximum_qos (line 2)" in out.stderr


def test_check_config_accepts_the_example() -> None:
    example = pathlib.Path(__file__).resolve().parents[1] / "etc" / "jetmq.toml"
    out = _jetmq("check-config", "--config", str(example))
    assert out.returncode == 0, out.stderr
    assert "configuration OK" in out.stdout


def test_no_command_prints_usage_and_exits_2() -> None:
    out = _jetmq()
    assert out.returncode == 2
    assert out.stderr.startswith("usage: jetmq")
    assert "required: COMMAND" in out.stderr
    assert out.stdout == ""


def _refused_by_both(*args: str) -> str:
    """``check-config`` and ``serve`` with the same arguments: both exit 1 with the same
    message, and serve never listens. Returns the message."""
    checked = _jetmq("check-config", *args)
    served = _jetmq("serve", *args)
    assert checked.returncode == 1, checked.stdout
    assert served.returncode == 1, served.stdout
    assert "listening" not in served.stdout
    assert checked.stderr == served.stderr
    assert checked.stderr.startswith("jetmq: configuration error\n")
    return checked.stderr.removeprefix("jetmq: configuration error\n").strip()


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        # RFC 6761: .invalid never resolves.
        ("nohost.invalid:1883", "--listen: 'nohost.invalid:1883': cannot resolve 'nohost.invalid'"),
        # RFC 5737 TEST-NET-1: no machine of ours has it.
        (
            "192.0.2.1:1883",
            "--listen: '192.0.2.1:1883': cannot listen on 192.0.2.1 port 1883:"
            " Cannot assign requested address",
        ),
        ("localhost", "--listen: 'localhost': expected HOST:PORT"),
        ("[]:1883", "--listen: '[]:1883': the host is empty"),
        (
            "127.0.0.1:65536",
            "--listen: '127.0.0.1:65536': the port must be an integer 0..65535, not '65536'",
        ),
    ],
)
@pytest.mark.timeout(60)
def test_a_bad_listen_flag_is_refused_by_check_config_and_serve_alike(
    tmp_path: pathlib.Path, listen: str, expected: str
) -> None:
    message = _refused_by_both("--listen", listen, "--data-dir", str(tmp_path / "data"))
    assert message.startswith(expected), message
    assert len(message.splitlines()) == 1


@pytest.mark.timeout(60)
def test_a_data_dir_that_cannot_be_created_is_refused_by_check_config_and_serve_alike(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "file").write_text("not a directory")
    data = tmp_path / "file" / "data"
    message = _refused_by_both("--listen", "127.0.0.1:0", "--data-dir", str(data))
    parent = str(tmp_path / "file")
    assert message == f"--data-dir: {str(data)!r}: cannot create it: {parent!r} is not a directory"


@pytest.mark.timeout(60)
def test_errors_from_a_file_name_the_file_key_line_and_value(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j.toml"
    path.write_text(
        f"[storage]\ndata_dir = {str(tmp_path / 'data')!r}\n\n"
        "[listener]\nlisten = ['127.0.0.1:0', 'nohost.invalid:1883']\n"
    )
    message = _refused_by_both("--config", str(path))
    assert message.startswith(
        f"{path}: listener.listen (line 5): 'nohost.invalid:1883': cannot resolve 'nohost.invalid'"
    ), message


@pytest.mark.timeout(60)
def test_check_config_creates_no_data_dir(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "a" / "b"
    out = _jetmq("check-config", "--listen", "127.0.0.1:0", "--data-dir", str(data))
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "a").exists()


@pytest.mark.timeout(60)
def test_serve_on_a_busy_port_names_the_flag_and_the_address(tmp_path: pathlib.Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        line = refused_at_start(serve_command(tmp_path / "data", holder.getsockname()[1]))
        assert line == f"jetmq: cannot start: --listen: {address!r}: Address already in use"
        # check-config passes: the port is checked at start, the running broker whose
        # configuration is being checked holds it.
        out = _jetmq("check-config", "--listen", address, "--data-dir", str(tmp_path / "data"))
        assert out.returncode == 0, out.stderr


@pytest.mark.timeout(60)
def test_serve_on_a_busy_port_names_the_key_and_line(tmp_path: pathlib.Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        path = tmp_path / "j.toml"
        path.write_text(
            f"[listener]\nlisten = [{address!r}]\n[storage]\ndata_dir = {str(tmp_path)!r}\n"
        )
        line = refused_at_start([sys.executable, "-m", "broker", "serve", "--config", str(path)])
    assert line == (
        f"jetmq: cannot start: {path}: listener.listen (line 2): {address!r}:"
        " Address already in use"
    )


@pytest.mark.timeout(60)
def test_sighup_is_logged_and_the_broker_serves_on(tmp_path: pathlib.Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        line = broker.wait_for_output("SIGHUP")
        assert line.strip() == "jetmq: SIGHUP: reloading the configuration"
        # Started without --config: nothing to re-read, the broker serves on.
        line = broker.wait_for_output("SIGHUP")
        assert line.strip() == "jetmq: SIGHUP: configuration not reloaded (see the log)"
        sub = Paho(broker.port, "hup-sub")
        pub = Paho(broker.port, "hup-pub")
        try:
            sub.connect()
            sub.subscribe("after/hup", qos=1)
            pub.connect()
            pub.publish("after/hup", b"still here", qos=1)
            assert sub.get().payload == b"still here"
        finally:
            pub.disconnect()
            sub.disconnect()
    finally:
        assert broker.terminate() == 0


def test_log_level_from_the_configuration_applies(tmp_path: pathlib.Path) -> None:
    """`log.level` decides which lines the broker writes, each with time, level and logger:
    a 3.1.1 publish to a reserved topic logs a warning, shown at "warning", not at "error"."""
    for level, shown in (("warning", True), ("error", False)):
        conf = tmp_path / f"{level}.toml"
        conf.write_text(f'[log]\nlevel = "{level}"\n')
        broker = BrokerProcess(tmp_path / f"data-{level}", config=conf)
        broker.start()
        try:
            with RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as c:
                c.connect(f"log-{level}")
                c.publish(b"$SYS/x", b"x", qos=1, packet_id=1)
                c.expect(Puback)
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGHUP)  # a marker line after the publish
            broker.wait_for_output("SIGHUP")
            lines = [line for line in broker.output if "reserved topic" in line]
            if shown:
                assert len(lines) == 1, broker.output
                assert " WARNING jetmq.client: client 'log-warning'" in lines[0]
            else:
                assert lines == [], lines
        finally:
            broker.terminate()

"""[auth]: password files written by ``jetmq passwd`` and by mosquitto_passwd, CONNACK
0x86 / 0x87 (3.1.1: return codes 4 / 5), failures logged without the password and
slowed down per address, and the start-up rule for exposed listeners."""

from __future__ import annotations

import io
import logging
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable

import pytest

from broker.cli import main
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.reason_codes import ReasonCode
from broker.security import passwords
from broker.security.backoff import BASE_DELAY, FREE_FAILURES, Backoff
from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import Paho
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)
V311 = ProtocolVersion.MQTT_3_1_1
LISTEN = '[[listeners]]\nbind = "127.0.0.1:0"\n'


def jetmq_passwd(
    monkeypatch: pytest.MonkeyPatch, path: pathlib.Path, user: str, password: str
) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    return main(["passwd", str(path), user, "--password-stdin"])


def test_jetmq_passwd_writes_mosquittos_pbkdf2_form(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "passwd"
    assert jetmq_passwd(monkeypatch, path, "alice", "s3cret") == 0
    assert jetmq_passwd(monkeypatch, path, "bob", "other") == 0
    assert jetmq_passwd(monkeypatch, path, "alice", "changed") == 0  # replaced, not added
    lines = path.read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["alice", "bob"]
    assert lines[0].split(":")[1].startswith(f"$7${passwords.ITERATIONS}$")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    users = passwords.load(path)
    assert users["alice"].verify(b"changed")
    assert not users["alice"].verify(b"s3cret")
    assert users["bob"].verify(b"other")


def test_jetmq_passwd_without_a_terminal_says_to_use_stdin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    assert main(["passwd", str(tmp_path / "pw"), "eve"]) == 1
    assert "--password-stdin" in capsys.readouterr().err
    assert not (tmp_path / "pw").exists()
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert main(["passwd", str(tmp_path / "pw"), "eve", "--password-stdin"]) == 1
    assert "empty password" in capsys.readouterr().err


def test_password_file_errors_name_the_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("# users\nalice:$7$101$AAAA$AAAA\nbob:plaintext\n")
    with pytest.raises(passwords.PasswordFileError, match="line 3: user 'bob'"):
        passwords.load(path)


def test_six_dollar_is_mosquittos_salted_sha512() -> None:
    import base64
    import hashlib

    salt = b"0123456789ab"
    digest = hashlib.sha512(b"pw" + salt).digest()
    entry = f"$6${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"
    hashed = passwords.parse_hash(entry)
    assert hashed.verify(b"pw")
    assert not hashed.verify(b"pw2")


def connack_bytes(port: int, version: ProtocolVersion, **connect: object) -> bytes:
    """The broker's raw answer to a CONNECT (3.1.1 return codes are checked as bytes)."""
    with RawClient(port, version=version) as raw:
        from broker.mqtt.packets import Connect

        raw.send(Connect(version, "probe", **connect))  # type: ignore[arg-type]
        raw.sock.settimeout(20)
        return raw.sock.recv(100)


@pytest.fixture
def password_broker(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: pathlib.Path,
    start_broker: Callable[[str], BrokerThread],
) -> BrokerThread:
    path = tmp_path / "passwd"
    jetmq_passwd(monkeypatch, path, "alice", "wonderland")
    return start_broker(LISTEN + f'[auth]\npassword_file = "{path}"\n')


def test_good_and_bad_credentials(
    password_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    port = password_broker.port
    ok = Paho(port, "alice-1")
    ok.client.username_pw_set("alice", "wonderland")
    try:
        assert ok.connect()[1] == 0
    finally:
        ok.disconnect()
    with caplog.at_level(logging.WARNING, logger="jetmq.auth"):
        with RawClient(port) as raw:
            connack = raw.connect("mallory-1", username="alice", password=b"guess-1")
        assert connack.reason_code is ReasonCode.BAD_USER_NAME_OR_PASSWORD
        with RawClient(port) as raw:
            connack = raw.connect("anon-1")
        assert connack.reason_code is ReasonCode.NOT_AUTHORIZED
    text = caplog.text
    assert "mallory-1" in text
    assert "127.0.0.1" in text
    assert "guess-1" not in text  # never the password
    # 3.1.1: return code 4 (bad user name or password) and 5 (not authorised).
    bad = connack_bytes(port, V311, username="alice", password=b"nope")
    assert bad == b"\x20\x02\x00\x04"
    anonymous = connack_bytes(port, V311)
    assert anonymous == b"\x20\x02\x00\x05"


def test_repeated_failures_from_one_address_are_slowed(password_broker: BrokerThread) -> None:
    port = password_broker.port
    times = []
    for i in range(FREE_FAILURES + 1):
        start = time.monotonic()
        with RawClient(port) as raw:
            connack = raw.connect(f"guess-{i}", username="alice", password=b"wrong")
        assert connack.reason_code is ReasonCode.BAD_USER_NAME_OR_PASSWORD
        times.append(time.monotonic() - start)
    assert times[-1] >= BASE_DELAY  # the 4th failure in a row waits
    ok = Paho(port, "alice-2")
    ok.client.username_pw_set("alice", "wonderland")
    try:
        assert ok.connect()[1] == 0  # the right password still gets in
    finally:
        ok.disconnect()


def test_backoff_schedule() -> None:
    b = Backoff()
    delays = []
    for i in range(8):
        delays.append(b.delay("10.0.0.1", float(i)))
        b.failed("10.0.0.1", float(i))
    assert delays == [0, 0, 0, 0.5, 1.0, 2.0, 4.0, 8.0]
    assert b.delay("10.0.0.2", 8.0) == 0  # per address
    assert b.delay("10.0.0.1", 8.0 + 301) == 0  # forgotten after a quiet while
    b.succeeded("10.0.0.1")
    assert b.delay("10.0.0.1", 9.0) == 0


def test_refuses_to_start_exposed_without_auth(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "exposed.toml"
    cfg.write_text('[[listeners]]\nbind = "0.0.0.0:0"\n')
    assert main(["check-config", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "0.0.0.0:0" in err
    assert "password_file" in err
    assert "allow_anonymous = true" in err
    cfg.write_text('[[listeners]]\nbind = "0.0.0.0:0"\n[auth]\nallow_anonymous = true\n')
    assert main(["check-config", "--config", str(cfg)]) == 0
    assert main(["check-config"]) == 0  # the default: 127.0.0.1, anonymous
    capsys.readouterr()


def test_old_listener_section_still_works_and_both_forms_are_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "old.toml"
    cfg.write_text('[listener]\nlisten = ["127.0.0.1:0"]\n')
    assert main(["check-config", "--config", str(cfg)]) == 0
    cfg.write_text('[listener]\nlisten = ["127.0.0.1:0"]\n[[listeners]]\nbind = "127.0.0.1:0"\n')
    assert main(["check-config", "--config", str(cfg)]) == 1
    assert "[[listeners]]" in capsys.readouterr().err


MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")
MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None
)


@pytest.mark.skipif(
    MOSQUITTO_PASSWD is None,
    reason="mosquitto_passwd not installed (Debian: apt-get install mosquitto)",
)
def test_files_written_by_mosquitto_passwd_are_accepted(
    tmp_path: pathlib.Path, start_broker: Callable[[str], BrokerThread]
) -> None:
    assert MOSQUITTO_PASSWD is not None
    path = tmp_path / "mosq-passwd"
    subprocess.run([MOSQUITTO_PASSWD, "-c", "-b", str(path), "pbkdf", "pw-7"], check=True)
    subprocess.run([MOSQUITTO_PASSWD, "-H", "sha512", "-b", str(path), "sha", "pw-6"], check=True)
    text = path.read_text()
    assert "pbkdf:$7$" in text
    assert "sha:$6$" in text
    broker = start_broker(LISTEN + f'[auth]\npassword_file = "{path}"\n')
    for user, password in (("pbkdf", "pw-7"), ("sha", "pw-6")):
        client = Paho(broker.port, f"mosq-{user}")
        client.client.username_pw_set(user, password)
        try:
            assert client.connect()[1] == 0
        finally:
            client.disconnect()
        with RawClient(broker.port) as raw:
            refused = raw.connect(f"bad-{user}", username=user, password=b"x")
        assert refused.reason_code is ReasonCode.BAD_USER_NAME_OR_PASSWORD


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(
    MOSQUITTO is None, reason="mosquitto not installed (Debian: apt-get install mosquitto)"
)
def test_mosquitto_accepts_a_file_written_by_jetmq_passwd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    assert MOSQUITTO is not None
    path = tmp_path / "passwd"
    jetmq_passwd(monkeypatch, path, "carol", "from-jetmq")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\npassword_file {path}\nallow_anonymous false\n"
        "persistence false\nlog_dest stderr\n" + ("user root\n" if os.geteuid() == 0 else "")
        # As root mosquitto would switch to user mosquitto, who cannot read a 0600 file.
    )
    proc = subprocess.Popen(
        [MOSQUITTO, "-c", str(conf)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        for line in proc.stderr:  # readiness from its own log, never a sleep
            if b"running" in line or time.monotonic() > deadline:
                break
        good = Paho(port, "carol-1")
        good.client.username_pw_set("carol", "from-jetmq")
        try:
            assert good.connect()[1] == 0
        finally:
            good.disconnect()
        bad = Paho(port, "carol-2")
        bad.client.username_pw_set("carol", "wrong")
        try:
            assert bad.connect()[1] != 0
        finally:
            bad.stop()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()

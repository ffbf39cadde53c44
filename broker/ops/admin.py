"""The operator's verbs against a running broker: ``jetmq status`` (its ``$SYS`` topics
over MQTT), ``jetmq clients`` and ``jetmq subs`` (the HTTP JSON API: the lists are not in
``$SYS``), and ``jetmq backup DIR`` (a consistent copy of the store while it runs).

Why two transports: ``$SYS`` is on whenever the broker runs with ``[sys] interval`` > 0 and
needs nothing else, so ``status`` works against any jetmq (or mosquitto) broker; the client
and subscription tables exist only in the HTTP API (``[http] bind``), which is read-only and
bound to loopback in the example configuration.

The MQTT side is a blocking socket driven by the sans-I/O codec (``broker.mqtt``): a
short-lived MQTT 3.1.1 client that subscribes to ``$SYS/broker/#`` and reads the retained
values. No trio, no threads.

Backup: LMDB's copy API on the environment opened read-only (``mdb_env_copy2`` with
compaction) runs in one read transaction, so the copy is a consistent snapshot taken while
the broker writes; readers never block the broker's writer. The copy is then opened with
the store's read-only reader to check its schema.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import lmdb

from broker.mqtt.connection import Connection, Role
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Disconnect, Publish, Subscribe, Subscription

READ_QUIET = 0.5  # seconds without a $SYS message once the summary's topics are in


class AdminError(Exception):
    """What the operator is told, one line (the broker is not there, no HTTP API...)."""


def read_sys(host: str, port: int, timeout: float = 10.0) -> dict[str, str]:
    """The retained ``$SYS/broker/...`` values of the broker at ``host:port``."""
    conn = Connection(Role.CLIENT)
    client_id = f"jetmq-status-{os.getpid()}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise AdminError(f"cannot reach the broker at {host}:{port}: {exc.strerror}") from exc
    values: dict[str, str] = {}
    with sock:
        sock.sendall(conn.send(Connect(ProtocolVersion.MQTT_3_1_1, client_id, True, 30)))
        deadline = time.monotonic() + timeout
        subscribed = False
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            have_all = "uptime" in values and "version" in values
            sock.settimeout(min(deadline - now, READ_QUIET) if have_all else deadline - now)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, Connack):
                    if event.reason_code.is_error:
                        raise AdminError(
                            f"the broker refused the connection: {event.reason_code!r}"
                        )
                    if not subscribed:
                        subscribed = True
                        sub = Subscribe(1, (Subscription(b"$SYS/broker/#", 0),))
                        sock.sendall(conn.send(sub))
                if isinstance(event, Publish):
                    topic = event.topic.decode("utf-8", "replace")
                    name = topic.removeprefix("$SYS/broker/")
                    values[name] = event.payload.decode("utf-8", "replace")
        sock.sendall(conn.send(Disconnect()))
    if not values:
        raise AdminError(f"no $SYS topics from {host}:{port} (is [sys] interval 0?)")
    return values


SUMMARY = (
    ("version", "version"),
    ("uptime", "uptime"),
    ("clients connected", "clients/connected"),
    ("clients disconnected", "clients/disconnected"),
    ("clients maximum", "clients/maximum"),
    ("subscriptions", "subscriptions/count"),
    ("retained messages", "retained messages/count"),
    ("messages received", "publish/messages/received"),
    ("messages sent", "publish/messages/sent"),
    ("messages in /min (1, 5, 15 min)", "load/publish/received/{}"),
    ("messages out /min (1, 5, 15 min)", "load/publish/sent/{}"),
    ("bytes received", "bytes/received"),
    ("bytes sent", "bytes/sent"),
    ("store size (bytes)", "store/size"),
    ("store map used (%)", "store/map/used"),
    ("streams", "store/streams"),
)


def format_status(values: dict[str, str]) -> str:
    lines = []
    for label, key in SUMMARY:
        if "{}" in key:
            parts = [values.get(key.format(w), "-") for w in ("1min", "5min", "15min")]
            value = ", ".join(parts)
        else:
            value = values.get(key, "-")
        lines.append(f"{label + ':':34} {value}")
    return "\n".join(lines)


def get_json(host: str, port: int, path: str, timeout: float = 10.0) -> Any:
    url = f"http://{host}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        exc.close()
        raise AdminError(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AdminError(f"cannot reach the HTTP API at {host}:{port} ({reason})") from exc


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    for r in cells:
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def backup(data_dir: str | os.PathLike[str], dest: str | os.PathLike[str]) -> dict[str, int]:
    """Copy the store in ``data_dir`` to the new or empty directory ``dest`` (consistent,
    compacted), then open the copy read-only; the copy's streams and sizes."""
    from store import keys
    from store.readonly import READ_MAX_READERS, ReadOnlyEnv

    src = pathlib.Path(data_dir)
    target = pathlib.Path(dest)
    if not (src / "data.mdb").is_file():
        raise AdminError(f"{src}: no store here (no data.mdb)")
    if target.exists() and any(target.iterdir()):
        raise AdminError(f"{target}: not empty; a backup goes to a new or empty directory")
    target.mkdir(parents=True, exist_ok=True)
    try:
        env = lmdb.open(
            str(src),
            readonly=True,
            lock=True,
            max_dbs=len(keys.ALL_DBS) + 4,
            max_readers=READ_MAX_READERS,
            readahead=False,
        )
    except lmdb.Error as exc:
        raise AdminError(f"cannot open the store in {src}: {exc}") from exc
    try:
        env.copy(str(target), compact=True)
    except lmdb.Error as exc:
        raise AdminError(f"copying {src} to {target} failed: {exc}") from exc
    finally:
        env.close()
    with ReadOnlyEnv(target) as copy:
        streams = len(copy.streams())
    return {"streams": streams, "bytes": (target / "data.mdb").stat().st_size}

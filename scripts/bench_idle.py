"""Idle connections: N connected MQTT 5 clients that only keep alive, brokers side by side.

    python3 scripts/bench_idle.py                       # jetmq and mosquitto, 3 rounds
    python3 scripts/bench_idle.py --clients 10000 --keepalive 20 --rounds 3 --json out.json
    python3 scripts/bench_idle.py --broker 'name:port:command' ...  # any brokers

Each run starts the broker fresh, connects ``--clients`` clients (MQTT 5, clean start,
keep alive K = ``--keepalive``; ``--inflight`` CONNECTs at a time, every CONNACK awaited),
then every client sends one PINGREQ per K seconds, spread evenly (client i at
``(i + 0.5) / N * K`` into each period), and every PINGRESP is counted. After one warm-up
period (every client has pinged once) the broker's CPU (utime + stime from
``/proc/<pid>/stat``) is measured over ``--window`` seconds (at least 20, default K). The
brokers take turns within each round, so the ratio holds on a shared machine; the table
gives medians with min-max and the per-round ratio of each broker to the last one
(mosquitto by default). The load average is printed beside the numbers.

Stdlib only (selectors); raises RLIMIT_NOFILE to its hard limit. Loopback only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import resource
import selectors
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "bench" / "mqttbench" / "anchors"
PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"
TICK = os.sysconf("SC_CLK_TCK")


def connect_packet(client_id: str, keepalive: int) -> bytes:
    cid = client_id.encode()
    body = (
        b"\x00\x04MQTT\x05\x02"
        + keepalive.to_bytes(2, "big")
        + b"\x00"  # no properties
        + len(cid).to_bytes(2, "big")
        + cid
    )
    return bytes([0x10, len(body)]) + body  # short ids: one length byte


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"bench_idle: the broker on port {port} exited ({proc.returncode})")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise SystemExit(f"bench_idle: nothing listens on port {port} after {timeout} s")


class Clients:
    """The clients of one run, on one selector."""

    def __init__(self, port: int, n: int, keepalive: int, label: str) -> None:
        self.port, self.n, self.keepalive, self.label = port, n, keepalive, label
        self.sel = selectors.DefaultSelector()
        self.socks: list[socket.socket] = []
        self.pongs = 0
        self.closed = 0
        self._next = 0  # the next client to ping, in period _period
        self._period = 0

    def connect(self, inflight: int) -> float:
        """Connect every client; seconds taken."""
        start = time.monotonic()
        pending: dict[socket.socket, bytes] = {}  # awaiting CONNACK -> bytes read so far
        nxt = 0
        done = 0
        while done < self.n:
            while nxt < self.n and len(pending) < inflight:
                s = socket.socket()
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.connect(("127.0.0.1", self.port))  # blocking connect: loopback, fast
                s.sendall(connect_packet(f"idle-{self.label}-{nxt}", self.keepalive))
                s.setblocking(False)
                pending[s] = b""
                self.sel.register(s, selectors.EVENT_READ)
                nxt += 1
            for key, _ in self.sel.select(10.0):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                data = pending[s] + s.recv(64)
                if not data:
                    raise SystemExit(f"bench_idle: client closed before CONNACK ({self.label})")
                if len(data) < 4 or len(data) < 2 + data[1]:
                    pending[s] = data
                    continue
                if data[0] != 0x20 or data[3] != 0:
                    raise SystemExit(f"bench_idle: CONNACK refused: {data[:8].hex()}")
                del pending[s]
                self.socks.append(s)
                done += 1
        return time.monotonic() - start

    def ping_for(self, t0: float, until: float, *, send: bool = True) -> int:
        """Send the PINGREQs due between t0's schedule and ``until``; count PINGRESPs.
        Returns the PINGREQs sent."""
        n, k = self.n, float(self.keepalive)
        sent = 0
        i, period = self._next, self._period
        while True:
            now = time.monotonic()
            if now >= until:
                self._next, self._period = i, period
                return sent
            # Send everything due by now.
            while True:
                due = t0 + period * k + (i + 0.5) / n * k
                if due > now or not send:
                    break
                try:
                    self.socks[i].send(PINGREQ)
                    sent += 1
                except OSError:
                    self.closed += 1
                i += 1
                if i == n:
                    i, period = 0, period + 1
            timeout = max(0.0, (min(due, until) if send else until) - time.monotonic())
            for key, _ in self.sel.select(timeout):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.closed += 1
                    self.sel.unregister(s)
                    continue
                self.pongs += data.count(PINGRESP)

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
        self.sel.close()


def run_one(label: str, port: int, cmd: str, args: argparse.Namespace) -> dict[str, object]:
    log = open(os.path.join(args.workdir, f"{label}.log"), "ab")  # noqa: SIM115
    proc = subprocess.Popen(shlex.split(cmd), stdout=log, stderr=log)
    clients = Clients(port, args.clients, args.keepalive, label)
    try:
        wait_port(port, proc)
        connect_s = clients.connect(args.inflight)
        t0 = time.monotonic()
        # Warm-up: one full keep-alive period, every client pings once.
        warm = clients.ping_for(t0, t0 + args.keepalive)
        cpu0, w0 = cpu_seconds(proc.pid), time.monotonic()
        sent = clients.ping_for(t0, w0 + args.window)
        cpu1, w1 = cpu_seconds(proc.pid), time.monotonic()
        # Let the last PINGRESPs arrive (no more PINGREQs).
        clients.ping_for(t0, time.monotonic() + 1.0, send=False)
        window = w1 - w0
        lost = warm + sent - clients.pongs
        rss_kb = 0
        for line in pathlib.Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
        return {
            "label": label,
            "clients": args.clients,
            "keepalive": args.keepalive,
            "connect_s": round(connect_s, 3),
            "window_s": round(window, 3),
            "pings_sent": sent,
            "pingresps_missing": lost,
            "closed": clients.closed,
            "cpu_pct": round(100 * (cpu1 - cpu0) / window, 2),
            "us_per_ping": round(1e6 * (cpu1 - cpu0) / max(sent, 1), 1),
            "rss_kb": rss_kb,
            "load": os.getloadavg()[0],
        }
    finally:
        clients.close()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def default_brokers(workdir: str) -> list[str]:
    conf = os.path.join(workdir, "jetmq.toml")
    pathlib.Path(conf).write_text('[log]\nlevel = "warning"\n')
    data = os.path.join(workdir, "jetmq-data")
    serve = (
        f"{ROOT}/.venv/bin/jetmq serve --config {conf} --listen 127.0.0.1:19870 --data-dir {data}"
    )
    jetmq = f"sh -c 'rm -rf {data}; exec {serve}'"  # a fresh store each run, same pid
    mconf = os.path.join(workdir, "mosquitto.conf")
    text = (SHARED / "mosquitto.conf").read_text().replace("19831", "19871")
    pathlib.Path(mconf).write_text(text + "max_connections -1\n")
    return [f"jetmq:19870:{jetmq}", f"mosquitto:19871:mosquitto -c {mconf}"]


def summary(runs: list[dict[str, object]], labels: list[str], rounds: int) -> str:
    by: dict[str, list[dict[str, object]]] = {label: [] for label in labels}
    for r in runs:
        by[str(r["label"])].append(r)
    lines = [
        f"{'broker':<12} {'cpu % (median, min-max)':>26} {'us/ping':>9} {'pings/s':>8} "
        f"{'lost':>5} {'connect s':>9} {'RSS MiB':>8}"
    ]
    for label in labels:
        rs = by[label]
        cpu = [float(str(r["cpu_pct"])) for r in rs]
        us = [float(str(r["us_per_ping"])) for r in rs]
        rate = [int(str(r["pings_sent"])) / float(str(r["window_s"])) for r in rs]
        lost = sum(int(str(r["pingresps_missing"])) for r in rs)
        conn = [float(str(r["connect_s"])) for r in rs]
        rss = [int(str(r["rss_kb"])) / 1024 for r in rs]
        lines.append(
            f"{label:<12} {statistics.median(cpu):>10.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
            f"{'':>4} {statistics.median(us):>9.1f} {statistics.median(rate):>8.0f} "
            f"{lost:>5} {statistics.median(conn):>9.2f} {statistics.median(rss):>8.1f}"
        )
    base = labels[-1]
    for label in labels[:-1]:
        ratios = [
            float(str(by[label][i]["cpu_pct"])) / max(float(str(by[base][i]["cpu_pct"])), 0.01)
            for i in range(rounds)
        ]
        lines.append(
            f"CPU {label}/{base}: median {statistics.median(ratios):.2f}x "
            f"(min-max {min(ratios):.2f}-{max(ratios):.2f}, per round {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument(
        "--keepalive", type=int, default=20, help="seconds (each client pings once per K)"
    )
    ap.add_argument("--window", type=float, default=0.0, help="measured seconds (default K, >= 20)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=100, help="CONNECTs awaiting CONNACK")
    ap.add_argument("--broker", action="append", default=[], help="label:port:command (repeatable)")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    args.window = args.window or float(args.keepalive)
    if args.window < 20:
        ap.error("--window must be at least 20 s")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < args.clients + 100:
        ap.error(f"RLIMIT_NOFILE hard limit {hard} is below --clients + 100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the brokers inherit it
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="jetmq-idle.")
    os.makedirs(args.workdir, exist_ok=True)
    brokers = args.broker or default_brokers(args.workdir)
    specs = []
    for spec in brokers:
        label, port, cmd = spec.split(":", 2)
        specs.append((label, int(port), cmd))
    runs = []
    for rnd in range(1, args.rounds + 1):
        for label, port, cmd in specs:
            r = run_one(label, port, cmd, args)
            r["round"] = rnd
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    print(
        f"idle: {args.clients} clients, keep alive {args.keepalive} s, window {args.window:.0f} s, "
        f"{args.rounds} rounds; load {os.getloadavg()[0]:.2f} (1 min) at the end"
    )
    print(summary(runs, [s[0] for s in specs], args.rounds))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(runs, indent=1))
    print(f"logs in {args.workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

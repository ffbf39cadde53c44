"""Distinct memory pages a broker touches per message: jetmq against mosquitto and the
plain-Python null broker (scripts/bench_pyfloor.py).

    .venv/bin/python scripts/bench_pages.py                  # all three, one message
    .venv/bin/python scripts/bench_pages.py --broker jetmq --messages 20
    .venv/bin/python scripts/bench_pages.py --broker jetmq --jetmq-root /tmp/jetmq-old  # another checkout

Each broker gets a subscriber (QoS 1) and a publisher; after --warmup round trips (QoS 1
PUBLISH, the delivery, its PUBACK, the publisher's PUBACK, then a 2 ms pause so the broker
goes idle as at a paced rate), the kernel's referenced bits of the broker's pages are
cleared (``/proc/PID/clear_refs``), --messages more round trips run, and the pages marked
referenced since are summed per mapping (``/proc/PID/smaps``): code (executable mappings)
and data. A wake-up that touches more distinct pages costs more than its instructions on a
virtual machine (TLB and cache refills), which callgrind does not see. Linux only.
"""

from __future__ import annotations

import argparse
import collections
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hotpath.train import Client, TrainingError, one_at_a_time  # noqa: E402

START_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _command(broker: str, port: int, work: Path, jetmq_root: Path = ROOT) -> list[str]:
    if broker == "jetmq":
        return [
            str(jetmq_root / ".venv" / "bin" / "jetmq"),
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(work / "data"),
        ]
    if broker == "mosquitto":
        conf = work / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
        return ["mosquitto", "-c", str(conf)]
    return [sys.executable, str(ROOT / "scripts" / "bench_pyfloor.py"), "--port", str(port)]


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TrainingError(f"nothing listening on port {port}")


def referenced(pid: int) -> collections.Counter[tuple[str, str]]:
    """Pages referenced per (code|data, mapping's file name or [anon])."""
    pages: collections.Counter[tuple[str, str]] = collections.Counter()
    mapping = ("data", "[anon]")
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's line
            name = Path(fields[5]).name if len(fields) > 5 else "[anon]"
            mapping = ("code" if "x" in fields[1] else "data", name)
        elif fields and fields[0] == "Referenced:":
            pages[mapping] += int(fields[1]) // 4  # kB, 4 KiB pages
    return pages


def measure(
    broker: str, messages: int, warmup: int, jetmq_root: Path = ROOT
) -> collections.Counter[tuple[str, str]]:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="jetmq-pages-") as work:
        cmd = _command(broker, port, Path(work), jetmq_root)
        with subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work
        ) as proc:
            try:
                _wait_listening(port)
                with Client(port, b"pages-s") as sub, Client(port, b"pages-p") as pub:
                    sub.subscribe(b"pages/t", 1)
                    one_at_a_time(sub, pub, warmup, 1, b"pages/t", pause=0.002)
                    time.sleep(0.2)
                    Path(f"/proc/{proc.pid}/clear_refs").write_text("1")
                    one_at_a_time(sub, pub, messages, 1, b"pages/t", pause=0.002)
                    time.sleep(0.05)
                    return referenced(proc.pid)
            finally:
                proc.terminate()
                proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=["jetmq", "mosquitto", "pyfloor"], action="append")
    parser.add_argument("--messages", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--top", type=int, default=6, help="mappings listed per broker")
    parser.add_argument(
        "--jetmq-root", type=Path, default=ROOT, help="the checkout (with .venv) of jetmq"
    )
    args = parser.parse_args()
    for broker in args.broker or ["jetmq", "mosquitto", "pyfloor"]:
        pages = measure(broker, args.messages, args.warmup, args.jetmq_root)
        code = sum(n for (kind, _), n in pages.items() if kind == "code")
        total = sum(pages.values())
        print(
            f"{broker:10} {args.messages} message(s): {total} pages ({code} code, "
            f"{total - code} data)"
        )
        for (kind, name), n in pages.most_common(args.top):
            print(f"    {n:5}  {kind} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

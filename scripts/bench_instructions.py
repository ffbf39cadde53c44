#!/usr/bin/env python3
"""User-space instructions per message and per connect, jetmq against mosquitto, counted
by valgrind's callgrind: a measure that does not move with the host's load.

Each broker runs under ``valgrind --tool=callgrind`` twice per scenario, once short and
once long; the difference of the two totals over the difference of the work is what one
unit costs, start-up and shutdown cancelled out. Scenarios (the mqttbench engine):

* ``latency``: QoS 1 publisher to a QoS 1 subscriber at a paced 50 msg/s (one wake-up
  per message, as at 2,000 msg/s without valgrind), 4 s and 14 s: per message. A broker
  also runs code by the clock (timers, keep-alive deadlines) that a rate of 50 msg/s would
  charge to the messages; the same two lengths at 1 msg/s tell it apart: with ``D`` each
  rate's difference of totals and ``N`` its difference of messages, the cost per message
  is ``(D50 - D1) / (N50 - N1)`` and the rest of ``D1`` is the cost per second (printed).
* ``storm``: clients connect, hold 0.5 s and disconnect, 300 and 1,300: per connect.

Kernel time is not counted (callgrind sees user space only): the ratio says how much
more code a message runs, not how much more CPU it costs (docs/benchmarks.md has both).

    .venv/bin/python scripts/bench_instructions.py [--scenario latency|storm ...]
        [--broker jetmq|mosquitto ...] [--json FILE]

Needs valgrind and mosquitto (Debian packages) and a venv (./scripts/run or ./scripts/test).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MQTTBENCH = ROOT.parent / "shared" / "bench" / "mqttbench"
READY_TIMEOUT_S = 300.0

# scenario -> (the short run's units, the long run's, the unit)
SCENARIOS = {"latency": (200, 700, "message"), "storm": (300, 1300, "connect")}
LATENCY_RATE = 50  # msg/s: the latency scenario's units are its seconds times this
CLOCK_RATE = 1  # msg/s: the same seconds at this rate measure the cost per second


def engine_args(scenario: str, n: int, rate: int = LATENCY_RATE) -> list[str]:
    """The engine's arguments for ``n`` units of ``scenario`` (latency: ``n`` messages at
    ``LATENCY_RATE``, sent at ``rate`` over the same seconds)."""
    if scenario == "latency":
        return ["--scenario", "latency", "--qos", "1", "--sub-qos", "1", "--rate", str(rate),
                "--duration", str(n // LATENCY_RATE)]  # fmt: skip
    return ["--scenario", "storm", "--clients", str(n), "--hold", "0.5"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"bench_instructions: the broker exited ({proc.returncode}) before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"bench_instructions: nothing listened on {port} in {READY_TIMEOUT_S:.0f} s")


def broker_command(broker: str, port: int, work: Path) -> list[str]:
    if broker == "jetmq":
        conf = work / "jetmq.toml"
        conf.write_text('[log]\nlevel = "warning"\n')
        data = work / "data"
        shutil.rmtree(data, ignore_errors=True)
        return [
            str(ROOT / ".venv" / "bin" / "python"),
            "-m",
            "broker.cli",
            "serve",
            "--config",
            str(conf),
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(data),
        ]
    conf = work / "mosquitto.conf"
    # user root: as root, mosquitto would drop to its own user and could not write the profile
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nuser root\n")
    return ["mosquitto", "-c", str(conf)]


def total_instructions(engine: str, broker: str, args: list[str], work: Path) -> int:
    """Callgrind's total for one broker run serving ``args``."""
    port = free_port()
    out = work / f"callgrind.{broker}.{port}"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"]
    cmd += broker_command(broker, port, work)
    log = (work / f"{broker}.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc)
        time.sleep(1.0)  # start-up work after the listener opens, equal in both runs
        run = subprocess.run(
            [engine, "--port", str(port), "--protocol", "5", *args],
            capture_output=True,
            timeout=600,
            check=False,
        )
        result = json.loads(run.stdout or b"{}")
        if result.get("status") != "ok":
            sys.exit(
                f"bench_instructions: {broker} {args}: {result.get('status')} "
                f"{result.get('error', run.stderr.decode()[-300:])}"
            )
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    m = re.search(rb"^totals: (\d+)", out.read_bytes(), re.M)
    if m is None:
        sys.exit(f"bench_instructions: no totals in {out}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    ap.add_argument("--broker", action="append", choices=["jetmq", "mosquitto"])
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    for tool in ("valgrind", "mosquitto"):
        if shutil.which(tool) is None:
            sys.exit(f"bench_instructions: {tool} is not installed (apt-get install {tool})")
    sys.path.insert(0, str(MQTTBENCH))
    with tempfile.TemporaryDirectory(prefix="jetmq-instr-") as tmp:
        work = Path(tmp)
        os.environ["MQTTBENCH_BUILD"] = str(work / "engine")
        # ../shared's harness builds the engine (under MQTTBENCH_BUILD).
        mqttbench: Any = importlib.import_module("mqttbench")
        engine: str = mqttbench.build_engine()
        state = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "python"),
                "-c",
                "import hotpath; print(hotpath.build_state())",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        ).stdout.strip()
        print(f"bench_instructions: jetmq's hot path: {state}")
        results: dict[str, dict[str, float]] = {}
        for scenario in args.scenario or ["latency", "storm"]:
            short, long, unit = SCENARIOS[scenario]
            row: dict[str, float] = {}
            for broker in args.broker or ["jetmq", "mosquitto"]:
                a = total_instructions(engine, broker, engine_args(scenario, short), work)
                b = total_instructions(engine, broker, engine_args(scenario, long), work)
                units = long - short
                clock = ""
                if scenario == "latency":
                    slow = [engine_args(scenario, n, CLOCK_RATE) for n in (short, long)]
                    d1 = total_instructions(engine, broker, slow[1], work) - total_instructions(
                        engine, broker, slow[0], work
                    )
                    slow_units = units * CLOCK_RATE // LATENCY_RATE
                    row[broker] = ((b - a) - d1) / (units - slow_units)
                    seconds = units / LATENCY_RATE
                    per_second = (d1 - slow_units * row[broker]) / seconds
                    row[f"{broker}_per_second"] = per_second
                    clock = f" (and {per_second:,.0f} per second by the clock, not counted)"
                else:
                    row[broker] = (b - a) / units
                print(
                    f"{scenario:8} {broker:10} {row[broker]:>10,.0f} instructions per {unit}"
                    f"{clock}",
                    flush=True,
                )
            if "jetmq" in row and "mosquitto" in row:
                print(f"{scenario:8} jetmq/mosquitto {row['jetmq'] / row['mosquitto']:.2f}x")
            results[scenario] = row
        if args.json:
            Path(args.json).write_text(
                json.dumps({"hot_path": state, "results": results}, indent=1)
            )


if __name__ == "__main__":
    main()

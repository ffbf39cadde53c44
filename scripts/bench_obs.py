"""What observability costs, measured where the cost is (issue 24), independent of how
busy the machine is:

1. the hot path: the counter adds a message pays (ns per operation, timeit);
2. the periodic work, per call, with N clients connected: one $SYS publication, one
   /metrics render; multiplied by their rate (1/interval, 1/scrape period) it is the
   share of a core they take.

    .venv/bin/python scripts/bench_obs.py [--clients 100]

The end-to-end A/B (same run, observability off vs on) is
``ROUNDS=5 BENCH_GROUPS="jetmq-nobs jetmq-obs" scripts/bench_broker.sh fanin qos1``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
import timeit
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from broker.core.stats import Histogram, Stats
from broker.ops import view
from broker.ops.metrics import Exporter
from broker.ops.systree import SysTree
from tests.broker.pahoclient import Paho
from tests.ops.harness import ops_broker, ops_config


def hot_path() -> dict[str, float]:
    class Host:
        stats = Stats()

    class Out:
        __slots__ = ("host",)

        def __init__(self) -> None:
            self.host = Host()

    env: dict[str, Any] = {
        "o": Out(),
        "p": b"x" * 100,
        "hist": Histogram(),
        "perf_counter": time.perf_counter,
    }
    n = 1_000_000
    base = min(timeit.repeat("pass", globals=env, number=n, repeat=5))
    cases = {
        "PUBLISH in: 2 adds + len(payload)": "s = o.host.stats; s.publish_received += 1; "
        "s.publish_bytes_received += len(p)",
        "PUBLISH out: 1 add": "o.host.stats.publish_sent += 1",
        "ack with nothing stored: observe_zero": "o.host.stats.publish_ack.observe_zero()",
        "ack after a commit: 2 clock reads + observe": "a = perf_counter(); "
        "hist.observe(perf_counter() - a)",
    }
    return {
        name: (min(timeit.repeat(code, globals=env, number=n, repeat=5)) - base) / n * 1e9
        for name, code in cases.items()
    }


def periodic(clients: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        config = ops_config(pathlib.Path(d) / "data", sys={"interval": 0})
        with ops_broker(config) as b:
            conns = []
            for i in range(clients):
                c = Paho(b.port, f"c{i}")
                c.connect()
                c.subscribe(f"t/{i}/#", qos=1)
                conns.append(c)

            def measure() -> dict[str, float]:
                assert b.ops is not None
                assert b.ops.broker is not None
                br = b.ops.broker
                tree = SysTree(br, time.monotonic())
                exporter = Exporter(br, time.monotonic())
                tree.publish()
                out = {}
                for name, fn in (
                    ("$SYS publication (changed values)", tree.publish),
                    ("/metrics render", exporter.render),
                    ("counters read (view.counters)", lambda: view.counters(br)),
                ):
                    n = 200
                    t = time.perf_counter()
                    for _ in range(n):
                        fn()
                    out[name] = (time.perf_counter() - t) / n * 1e6
                return out

            try:
                return b.call(measure)
            finally:
                for c in conns:
                    c.disconnect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    args = parser.parse_args()
    print("hot path (ns per operation):")
    for name, ns in hot_path().items():
        print(f"  {name:48} {ns:6.0f} ns")
    print(f"periodic work, {args.clients} clients connected (µs per call):")
    for name, us in periodic(args.clients).items():
        print(f"  {name:48} {us:6.0f} µs  = {us / 1e4:.3f} % of a core at once a second")


if __name__ == "__main__":
    main()

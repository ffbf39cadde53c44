"""A/B of two brokers from alternating mqttbench rounds (``ROUNDS=N scripts/bench_broker.sh``).

    python3 scripts/bench_ab.py A_LABEL B_LABEL RESULTS_DIR

Reads ``RESULTS_DIR/<label>-r<i>.json`` (one run per scenario per round, the two brokers
alternating), pairs round i of B with round i of A, and prints per metric the median of
B's values, A's, and the median of the per-round ratios B/A with their spread (min-max).
Higher is better for rates; for latencies and costs the ratio is A/B, so > 1 always means
B is better. Stdlib only.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys

# (scenario, metric, higher is better)
METRICS = [
    ("fanin", "delivered_per_s", True),
    ("fanout", "delivered_per_s", True),
    ("qos1", "delivered_per_s", True),
    ("latency", "lat_p50_ms", False),
    ("latency", "lat_p99_ms", False),
    ("subs", "published_per_s", True),
    ("subs", "subscribe_s", False),
    ("storm", "connects_per_s", True),
    ("storm", "rss_per_conn_kb", False),
]


def _value(path: pathlib.Path, scenario: str, metric: str) -> float | None:
    data = json.loads(path.read_text())
    median = data["results"].get(scenario, {}).get("median") or {}
    if median.get("status") != "ok":
        return None
    value = median.get(metric)
    return float(value) if isinstance(value, int | float) else None


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    a_label, b_label, folder = argv[0], argv[1], pathlib.Path(argv[2])
    rounds = sorted(int(p.stem.rsplit("-r", 1)[1]) for p in folder.glob(f"{a_label}-r*.json"))
    print(f"| metric | {b_label} | {a_label} | ratio (median, min-max, {len(rounds)} rounds) |")
    print("|---|---|---|---|")
    for scenario, metric, higher in METRICS:
        a_vals, b_vals, ratios = [], [], []
        for i in rounds:
            a = _value(folder / f"{a_label}-r{i}.json", scenario, metric)
            b_path = folder / f"{b_label}-r{i}.json"
            b = _value(b_path, scenario, metric) if b_path.exists() else None
            if a is None or b is None or a == 0 or b == 0:
                continue
            a_vals.append(a)
            b_vals.append(b)
            ratios.append(b / a if higher else a / b)
        if not ratios:
            print(f"| {scenario} {metric} | - | - | - |")
            continue
        print(
            f"| {scenario} {metric} | {statistics.median(b_vals):,.2f} | "
            f"{statistics.median(a_vals):,.2f} | {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}-{max(ratios):.3f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

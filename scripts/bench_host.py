"""The host's state during a ``scripts/bench_broker.sh`` run: CPU stolen by the hypervisor.

    python3 scripts/bench_host.py RESULTS_DIR

On a shared VM the hypervisor runs other guests on our cores ("steal" in /proc/stat; the
mqttbench engine records it per run as ``cpu.host_steal_pct``, percent of one core over the
run's window). While it is high, every broker pays more CPU per wake-up (docs/benchmarks.md
has figures), so a ratio of runs at different steal says more about the host than about
the brokers.

For every group and scenario in RESULTS_DIR (``<group>.json``, or ``<group>-r<i>.json``
from ROUNDS=N), this prints each run's broker CPU per unit (per message delivered; per
message sent for ``latency``; per client connected for ``storm``) with its steal, then the
median of all runs and the median of the runs with steal at most ``QUIET_STEAL_PCT``.
Stdlib only.
"""

from __future__ import annotations

import json
import pathlib
import re
import statistics
import sys
from typing import Any

# Runs with more steal than this are marked (*) and left out of the "quiet" median.
QUIET_STEAL_PCT = 20.0

# scenario -> the count the broker CPU is divided by
UNITS = {"latency": "sent", "storm": "clients_connected"}


def _runs(path: pathlib.Path) -> dict[str, list[dict[str, Any]]]:
    """scenario -> runs of one mqttbench results file ({} for any other JSON)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict):
        return {}
    return {
        name: [run for run in result.get("runs") or [] if isinstance(run, dict)]
        for name, result in results.items()
        if isinstance(result, dict)
    }


def _cost(scenario: str, run: dict[str, Any]) -> tuple[float, float] | None:
    """(broker us per unit, steal %) of one run, None where the run lacks them."""
    cpu = run.get("cpu") or {}
    count = run.get(UNITS.get(scenario, "received"))
    broker_s, steal = cpu.get("broker_s"), cpu.get("host_steal_pct")
    if run.get("status") != "ok" or not count or broker_s is None or steal is None:
        return None
    return broker_s * 1e6 / count, float(steal)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = pathlib.Path(argv[0])
    table: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for path in sorted(folder.glob("*.json")):
        group = re.sub(r"-r\d+$", "", path.stem)  # ROUNDS=N: <group>-r<i>.json
        for scenario, runs in _runs(path).items():
            for run in runs:
                cost = _cost(scenario, run)
                if cost is not None:
                    table.setdefault((group, scenario), []).append(cost)
    if not table:
        print(f"bench_host: no runs with CPU and steal figures in {folder}")
        return 0
    print(f"\nHost: broker CPU per unit (us) and steal per run; * = steal > {QUIET_STEAL_PCT:g} %")
    print("| group | scenario | runs (us @ steal %) | median | median, quiet runs |")
    print("|---|---|---|---|---|")
    for (group, scenario), costs in sorted(table.items()):
        cells = " ".join(
            f"{us:.1f}@{steal:.0f}{'*' if steal > QUIET_STEAL_PCT else ''}" for us, steal in costs
        )
        quiet = [us for us, steal in costs if steal <= QUIET_STEAL_PCT]
        quiet_median = f"{statistics.median(quiet):.1f} ({len(quiet)})" if quiet else "-"
        median = statistics.median(us for us, _ in costs)
        print(f"| {group} | {scenario} | {cells} | {median:.1f} | {quiet_median} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

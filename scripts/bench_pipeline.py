#!/usr/bin/env python3
"""Benchmark of the ``jetmq`` Spark source: a batch read of N stored messages (100-byte
payloads) through ``path=`` against Spark reading the same rows from a Parquet file, in the
same run and the same SparkSession.

Both reads materialise every column of every row into Spark's ``noop`` sink
(``df.write.format("noop")``): no column pruning helps either side. The Parquet file is
written from the jetmq read itself, so both hold the same rows and schema. Each read runs
``--repeats`` times, alternating; the report gives medians, min-max spread and the ratio.

Usage: ``.venv/bin/python scripts/bench_pipeline.py [--n 1000000] [--repeats 3]
[--master local[2]] [--partition 100000]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.session import build_session
from store import Publish, Store


def fill(path: str, n: int, payload_size: int) -> float:
    payload = b"x" * payload_size
    t0 = time.perf_counter()
    with Store.open(path, sync="batch") as st:
        st.create_stream({"name": "BENCH", "subjects": ["bench.>"]})
        batch = 10_000
        futs = []
        for i in range(0, n, batch):
            futs.append(
                st.submit(
                    [
                        Publish(f"bench.dev{j % 100}", payload, (), "BENCH")
                        for j in range(i, min(n, i + batch))
                    ]
                )
            )
            if len(futs) > 8:
                futs.pop(0).result()
        for f in futs:
            f.result()
    return time.perf_counter() - t0


def timed(df: Any) -> float:
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="messages (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each read (default 3)")
    ap.add_argument("--payload", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--partition", type=int, default=100_000, help="maxRecordsPerPartition")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="jetmq-bench-pipeline-")
    try:
        data = os.path.join(work, "data")
        secs = fill(data, args.n, args.payload)
        print(f"stored {args.n:,} messages of {args.payload} bytes in {secs:.1f} s", flush=True)
        spark = build_session(args.master, "jetmq-bench-pipeline", quiet=True)
        jet = (
            spark.read.format("jetmq")
            .option("path", data)
            .option("maxRecordsPerPartition", str(args.partition))
            .load()
        )
        lean = (
            spark.read.format("jetmq")
            .option("path", data)
            .option("maxRecordsPerPartition", str(args.partition))
            .option("includeHeaders", "false")
            .load()
        )
        parquet_dir = os.path.join(work, "rows.parquet")
        jet.write.parquet(parquet_dir)
        pq = spark.read.parquet(parquet_dir)
        assert pq.count() == args.n, "the Parquet copy does not hold every row"
        timed(jet)  # warm-up: Python workers started, files in the page cache
        timed(lean)
        timed(pq)
        t_jet: list[float] = []
        t_lean: list[float] = []
        t_pq: list[float] = []
        for _ in range(args.repeats):
            t_jet.append(timed(jet))
            t_pq.append(timed(pq))
            t_lean.append(timed(lean))
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def line(name: str, ts: list[float]) -> float:
        rates = [args.n / t for t in ts]
        med = statistics.median(rates)
        print(
            f"{name:>26}: {med:>12,.0f} rows/s median"
            f" (min {min(rates):,.0f}, max {max(rates):,.0f}; {args.repeats} runs:"
            f" {', '.join(f'{t:.2f}' for t in ts)} s)"
        )
        return med

    print(f"batch read of {args.n:,} messages, master {args.master}:")
    a = line("jetmq source (path=)", t_jet)
    c = line("same, includeHeaders=false", t_lean)
    b = line("Parquet (all columns)", t_pq)
    print(f"{'ratio jetmq / Parquet':>26}: {a / b:.2f}x (target >= 0.5x)")
    print(f"{'ratio without headers':>26}: {c / b:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

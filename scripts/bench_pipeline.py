#!/usr/bin/env python3
"""Benchmark of the ``jetmq`` Spark source: a batch read of N stored messages (100-byte
payloads) through ``path=`` (and, with ``--url``, through a running broker's JetStream API)
against Spark reading the same rows from a Parquet file, in the same run and the same
SparkSession; with ``--freshness S``, how long a message published through the broker takes
to become a row in a Parquet sink of a streaming query with a 1 s trigger.

Both reads materialise every column of every row into Spark's ``noop`` sink
(``df.write.format("noop")``): no column pruning helps either side. The Parquet file is
written from the jetmq read itself, so both hold the same rows and schema. Each read runs
``--repeats`` times, alternating; the report gives medians, min-max spread and the ratio.

Usage: ``.venv/bin/python scripts/bench_pipeline.py [--n 1000000] [--repeats 3]
[--master local[2]] [--partition 100000] [--floor-rows 10000] [--url] [--freshness 30]``.

Also timed: a "floor" source with the same schema that yields one prepared RecordBatch
over and over (no reading, no decoding): what pyspark's Python data source path costs by
itself, the best any Python reader can do.

``--url`` starts ``jetmq serve`` on the filled data directory (a free loopback port) and
reads it with ``option("url", ...)``; ``--freshness S`` publishes 20 messages/s for S
seconds with paho at QoS 1 into a stream the broker captures, while a streaming query
(``path=``, ``trigger(processingTime="1 second")``) appends them to Parquet; each
message's freshness is the time its row was first seen in the Parquet files (polled every
50 ms) minus its publish time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    jetmq = os.path.join(os.path.dirname(sys.executable), "jetmq")
    proc = subprocess.Popen(
        [jetmq, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on" in line:
            break
    else:
        raise RuntimeError("jetmq serve did not start")
    threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
    return proc, port


def freshness(spark: Any, work: str, port: int, seconds: float) -> list[float]:
    """Publish 20 msg/s for ``seconds``; each message's publish -> Parquet row delay (s)."""
    import paho.mqtt.client as mqtt
    import pyarrow.parquet as pq
    from paho.mqtt.enums import CallbackAPIVersion

    from pipeline.mqttpub import BrokerAddress
    from pipeline.netread import JsLink

    link = JsLink(BrokerAddress("127.0.0.1", port))
    link.request("STREAM/CREATE/FRESH", {"name": "FRESH", "subjects": ["fresh.>"]})
    link.close()
    out = os.path.join(work, "fresh.parquet")
    q = (
        spark.readStream.format("jetmq")
        .option("path", os.path.join(work, "data"))
        .option("streams", "FRESH")
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", os.path.join(work, "fresh.ck"))
        .trigger(processingTime="1 second")
        .start()
    )
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    done = threading.Event()

    def poll() -> None:
        read: set[str] = set()
        while not done.is_set() or len(seen) < len(sent):
            if os.path.isdir(out):
                for name in os.listdir(out):
                    if name.endswith(".parquet") and name not in read:
                        try:
                            t = pq.read_table(os.path.join(out, name), columns=["payload"])
                        except Exception:
                            continue
                        read.add(name)
                        now = time.time()
                        for payload in t.column("payload").to_pylist():
                            seen.setdefault(json.loads(payload)["i"], now)
            time.sleep(0.05)
            if done.is_set() and time.time() > stop_at + 30:
                break

    stop_at = time.time() + seconds
    poller = threading.Thread(target=poll)
    time.sleep(3)  # the query's first (empty) batches
    poller.start()
    i = 0
    while time.time() < stop_at:
        sent[i] = time.time()
        client.publish("fresh/dev", json.dumps({"i": i}), qos=1).wait_for_publish(10)
        i += 1
        time.sleep(max(0.0, sent[i - 1] + 0.05 - time.time()))
    done.set()
    poller.join()
    client.loop_stop()
    client.disconnect()
    q.stop()
    missing = [k for k in sent if k not in seen]
    if missing:
        print(f"freshness: {len(missing)} of {len(sent)} messages never seen", flush=True)
    return sorted(seen[k] - sent[k] for k in sent if k in seen)


def floor_source(data: str, n: int, partition: int, batch_rows: int = 10_000) -> Any:
    """A data source with the jetmq schema that yields ONE prepared RecordBatch (the first
    10,000 stored rows, decoded once per task, repeated to ``batch_rows``) over and over,
    ``n`` rows in all, in as many partitions as the jetmq read: what pyspark's Python data
    source path costs with no reading at all, the floor of any reader written in Python."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    parts = max(1, -(-n // partition))

    class FloorReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(parts)]

        def read(self, partition: InputPartition) -> Any:
            from pipeline import batches, storeread

            meta = storeread.list_streams(data)["BENCH"]
            rows = next(storeread.scan(data, meta.sid, 1, meta.last_seq, 10_000))
            batch = batches.to_batch("BENCH", rows)
            if batch_rows > batch.num_rows:
                import pyarrow as pa

                copies = -(-batch_rows // batch.num_rows)
                table = pa.Table.from_batches([batch] * copies).combine_chunks()
                batch = table.slice(0, batch_rows).to_batches()[0]
            todo = n // parts
            while todo > 0:
                yield batch if todo >= batch.num_rows else batch.slice(0, todo)
                todo -= batch.num_rows

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "jetmqfloor"

        def schema(self) -> str:
            from pipeline import batches

            return batches.SCHEMA_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    return FloorSource


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
    ap.add_argument(
        "--floor-rows", type=int, default=10_000, help="rows per RecordBatch of the floor source"
    )
    ap.add_argument("--url", action="store_true", help="also read through a running broker")
    ap.add_argument("--freshness", type=float, default=0.0, metavar="S", help="freshness run")
    args = ap.parse_args()
    broker: subprocess.Popen[str] | None = None
    t_url: list[float] = []
    fresh: list[float] = []
    work = tempfile.mkdtemp(prefix="jetmq-bench-pipeline-")
    try:
        data = os.path.join(work, "data")
        secs = fill(data, args.n, args.payload)
        print(f"stored {args.n:,} messages of {args.payload} bytes in {secs:.1f} s", flush=True)
        spark = build_session(args.master, "jetmq-bench-pipeline", quiet=True)
        if args.url or args.freshness:
            broker, port = start_broker(data)
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
        net = (
            spark.read.format("jetmq")
            .option("url", f"mqtt://127.0.0.1:{port}")
            .option("streams", "BENCH")
            .option("maxRecordsPerPartition", str(args.partition))
            .load()
            if args.url
            else None
        )
        spark.dataSource.register(floor_source(data, args.n, args.partition, args.floor_rows))
        floor = spark.read.format("jetmqfloor").load()
        timed(jet)  # warm-up: Python workers started, files in the page cache
        timed(lean)
        timed(pq)
        timed(floor)
        t_jet: list[float] = []
        t_lean: list[float] = []
        t_pq: list[float] = []
        t_floor: list[float] = []
        for _ in range(args.repeats):
            t_jet.append(timed(jet))
            t_pq.append(timed(pq))
            t_lean.append(timed(lean))
            t_floor.append(timed(floor))
            if net is not None:
                t_url.append(timed(net))
        if args.freshness:
            fresh = freshness(spark, work, port, args.freshness)
        spark.stop()
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(60)
        shutil.rmtree(work, ignore_errors=True)

    def line(name: str, ts: list[float]) -> float:
        rates = [args.n / t for t in ts]
        med = statistics.median(rates)
        print(
            f"{name:>26}: {med:>12,.0f} rows/s median"
            f" (min {min(rates):,.0f}, max {max(rates):,.0f}; {args.repeats} runs:"
            f" {', '.join(f'{t:.2f}' for t in ts)} s)"
        )
        return float(med)

    print(f"batch read of {args.n:,} messages, master {args.master}:")
    a = line("jetmq source (path=)", t_jet)
    c = line("same, includeHeaders=false", t_lean)
    b = line("Parquet (all columns)", t_pq)
    print(f"{'ratio jetmq / Parquet':>26}: {a / b:.2f}x (target >= 0.5x)")
    print(f"{'ratio without headers':>26}: {c / b:.2f}x")
    f = line("floor: prepared batch", t_floor)
    print(f"{'ratio floor / Parquet':>26}: {f / b:.2f}x (pyspark's Python source, no reading)")
    if t_url:
        u = line("jetmq source (url=)", t_url)
        print(f"{'ratio url= / Parquet':>26}: {u / b:.3f}x (target >= 0.2x)")
    if fresh:
        p50 = fresh[len(fresh) // 2]
        p95 = fresh[int(len(fresh) * 0.95)]
        print(
            f"{'freshness (1 s trigger)':>26}: p50 {p50:.2f} s, p95 {p95:.2f} s, max"
            f" {fresh[-1]:.2f} s over {len(fresh)} messages (target p50 <= 3 s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

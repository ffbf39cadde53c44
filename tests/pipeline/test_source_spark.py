"""The ``jetmq`` source under a real SparkSession (local[2]) over stores on disk."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest

from pipeline import storeread
from store import Store
from tests.pipeline.conftest import fill
from tests.store.conftest import start_child

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]


Row = tuple[str, int, str, str, bytes, dict[str, str]]


def _rows(df: Any) -> list[Row]:
    return [
        (
            r.stream,
            r.seq,
            r.subject,
            r.topic,
            bytes(r.payload),
            dict(r.asDict().get("headers") or {}),
        )
        for r in df.orderBy("stream", "seq").collect()
    ]


def test_batch_read_equals_what_was_stored(
    spark: Any, store: Store, data_dir: pathlib.Path
) -> None:
    store.create_stream({"name": "ORDERS", "subjects": ["orders.>"]})
    store.create_stream({"name": "EVENTS", "subjects": ["events.>"]})
    subjects = [f"orders.eu.dev{i % 3}" for i in range(250)]
    payloads = [bytes([i % 256]) * (i % 17) for i in range(250)]
    headers = [(("Nats-Msg-Id", f"m{i}"), ("x", "1")) if i % 10 == 0 else () for i in range(250)]
    fill(store, "ORDERS", subjects, payloads, headers)
    fill(store, "EVENTS", ["events.a/.b"] * 5, [b"e"] * 5)
    store.delete_msg("ORDERS", 7)  # a gap: skipped, not an error
    expect: list[Row] = [
        ("EVENTS", i + 1, "events.a/.b", "events/a/b", b"e", {}) for i in range(5)
    ] + [
        ("ORDERS", i + 1, subjects[i], subjects[i].replace(".", "/"), payloads[i], dict(headers[i]))
        for i in range(250)
        if i + 1 != 7
    ]

    def reader() -> Any:  # a new one each time: DataFrameReader.option mutates it
        return spark.read.format("jetmq").option("path", str(data_dir))

    df = reader().option("maxRecordsPerPartition", "100").load()
    assert df.rdd.getNumPartitions() == 4  # ORDERS 1-100, 101-200, 201-250; EVENTS 1-5
    assert _rows(df) == expect
    # streams, bounds, subjectFilter, no headers
    some = (
        reader()
        .option("streams", "ORDERS")
        .option("startingSequence", '{"ORDERS": 5}')
        .option("endingSequence", '{"ORDERS": 20}')
        .option("subjectFilter", "orders.*.dev1")
        .option("includeHeaders", "false")  # no headers column at all
        .load()
    )
    assert "headers" not in some.columns
    want: list[Row] = [(*e[:5], {}) for e in expect if e[0] == "ORDERS" and 5 <= e[1] <= 20]
    assert _rows(some) == [e for e in want if e[2].endswith("dev1")]
    # filters pushed down give what Spark's own filtering gives
    cond = "stream = 'ORDERS' AND seq > 100 AND seq <= 160 AND subject IN ('orders.eu.dev0')"
    pushed = reader().option("filterPushdown", "true").load().filter(cond)
    assert _rows(pushed) == _rows(df.filter(cond))
    assert len(_rows(pushed)) == 20


def test_bad_input_is_a_clear_error(spark: Any, store: Store, data_dir: pathlib.Path) -> None:
    store.create_stream({"name": "ORDERS", "subjects": ["orders.>"]})
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("jetmq").option("path", str(data_dir / "missing")).load().collect()
    with pytest.raises(Exception, match=r"stream 'NOPE' does not exist.*ORDERS"):
        (
            spark.read.format("jetmq")
            .option("path", str(data_dir))
            .option("streams", "NOPE")
            .load()
            .collect()
        )
    both = spark.read.format("jetmq").option("url", "mqtt://127.0.0.1:1")
    with pytest.raises(Exception, match=r"either option 'path'.*or option 'url'"):
        both.option("path", str(data_dir)).load().collect()


def _drain(spark: Any, data_dir: pathlib.Path, out: pathlib.Path, **opts: str) -> list[int]:
    """One availableNow run into Parquet at ``out``; the rows of each micro-batch."""
    stream = spark.readStream.format("jetmq").option("path", str(data_dir))
    for k, v in opts.items():
        stream = stream.option(k, v)
    q = (
        stream.load()
        .writeStream.format("parquet")
        .option("path", str(out / "rows"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(300)
    return [p["numInputRows"] for p in q.recentProgress]


def test_streaming_available_now_across_appends_and_a_restart(
    spark: Any, tmp_path: pathlib.Path, data_dir: pathlib.Path
) -> None:
    out = tmp_path / "out"
    st = Store.open(data_dir, sync="batch")
    st.create_stream({"name": "ORDERS", "subjects": ["orders.>"], "max_msgs": 20})
    fill(st, "ORDERS", ["orders.a"] * 25, [b"%d" % i for i in range(25)])  # 6..25 kept
    batches = _drain(spark, data_dir, out, maxRecordsPerTrigger="10")
    assert batches == [10, 10]
    fill(st, "ORDERS", ["orders.b"] * 5, [b"b"] * 5)
    st.close()  # the broker restarts
    st = Store.open(data_dir, sync="batch")
    st.create_stream({"name": "LATE", "subjects": ["late.>"]})  # a stream that came later
    fill(st, "LATE", ["late.x"] * 3, [b"l"] * 3)
    fill(st, "ORDERS", ["orders.c"] * 3, [b"c"] * 3)
    batches = _drain(spark, data_dir, out, maxRecordsPerTrigger="10")
    assert sum(batches) == 11
    assert max(batches) <= 10
    assert sum(_drain(spark, data_dir, out)) == 0  # nothing new: nothing read
    # retention: 30 more into a stream keeping 20 removes 34..43 before Spark read them
    fill(st, "ORDERS", ["orders.d"] * 30, [b"d"] * 30)
    st.close()
    assert sum(_drain(spark, data_dir, out)) == 20  # the gap is skipped, not an error
    meta = storeread.list_streams(str(data_dir))["ORDERS"]
    assert (meta.first_seq, meta.last_seq) == (44, 63)
    assert 30 - storeread.count_stored(str(data_dir), meta.sid, 34, 63) == 10
    got = spark.read.parquet(str(out / "rows"))
    seqs = sorted(r.seq for r in got.filter("stream = 'ORDERS'").select("seq").collect())
    assert seqs == [*range(6, 34), *range(44, 64)]
    assert got.filter("stream = 'LATE'").count() == 3
    storeread.close_all()


def test_a_running_query_sees_appends_and_new_streams_while_a_writer_runs(
    spark: Any, store: Store, data_dir: pathlib.Path
) -> None:
    store.create_stream({"name": "FAST", "subjects": ["fast.>"]})
    store.close()
    path = str(data_dir)
    child_args = ("-m", "tests.pipeline.writer_child", path, "FAST", "fast.x", "500", "50000")
    with start_child(*child_args, "NEW", stdin=True, stderr=False) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            q = (
                spark.readStream.format("jetmq")
                .option("path", path)
                .option("maxRecordsPerTrigger", "20000")
                .load()
                .writeStream.format("memory")
                .queryName("fast_rows")
                .trigger(processingTime="1 second")
                .start()
            )
            try:
                assert child.stdout.readline().strip() == "busy"
                deadline = time.monotonic() + 240
                count = "SELECT count(*) c FROM fast_rows WHERE stream = '{}'"
                while (
                    spark.sql(count.format("FAST")).first().c < 50000
                    or spark.sql(count.format("NEW")).first().c < 10
                ):
                    assert time.monotonic() < deadline, q.lastProgress
                    assert q.isActive, q.exception()
                    q.awaitTermination(1)
            finally:
                q.stop()
        finally:
            assert child.stdin is not None
            child.stdin.close()
            assert child.wait(timeout=60) == 0
    rows = spark.sql(
        "SELECT seq, length(payload) n FROM fast_rows WHERE stream = 'FAST' ORDER BY seq"
    ).collect()
    assert [r.seq for r in rows] == list(range(1, 50001))  # in order, none lost, none twice
    assert {r.n for r in rows} == {100}

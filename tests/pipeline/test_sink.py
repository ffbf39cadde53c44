"""The ``jetmq`` sink against a real ``jetmq serve`` child process and paho subscribers."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline import storeread
from pipeline.mqttpub import BrokerAddress, Publisher, PublishError
from pipeline.sink import SinkCommit, parse_sink_options, publish_rows
from store import Store
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho
from tests.pipeline.conftest import fill


def _subscriber(port: int, topic: str) -> Paho:
    sub = Paho(port)
    sub.connect()
    sub.subscribe(topic, qos=1)
    return sub


def _drain(sub: Paho, n: int) -> list[Any]:
    return [sub.get(timeout=20) for _ in range(n)]


@pytest.mark.timeout(120)
def test_publisher_returns_after_every_puback_and_a_failed_task_loses_nothing(
    broker_process: BrokerProcess,
) -> None:
    sub = _subscriber(broker_process.port, "t/#")
    try:
        opts = parse_sink_options({"url": f"mqtt://127.0.0.1:{broker_process.port}"})
        rows: list[dict[str, Any]] = [
            {"topic": f"t/{i % 5}", "payload": b"%d" % i} for i in range(600)
        ]
        commit = publish_rows(opts, iter(rows), 3)
        assert commit == SinkCommit(3, 600)
        got = _drain(sub, 600)
        assert [m.payload for m in got] == [r["payload"] for r in rows]  # in order, all
        assert {m.qos for m in got} == {1}

        def failing() -> Iterator[dict[str, Any]]:
            yield from rows[:100]
            raise RuntimeError("the task died")

        with pytest.raises(RuntimeError, match="the task died"):
            publish_rows(opts, failing(), 0)  # no commit message: Spark retries the task
        publish_rows(opts, iter(rows[:300]), 0)  # the retry
        got = [m.payload for m in _drain(sub, 400)]
        assert sorted(set(got)) == sorted({r["payload"] for r in rows[:300]})
        assert sub.none_within(0.3)
    finally:
        sub.disconnect()


@pytest.mark.timeout(120)
def test_publisher_fails_loudly_when_the_broker_is_gone(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PublishError, match="cannot connect"):
        Publisher(BrokerAddress("127.0.0.1", 1), timeout=5)
    proc = BrokerProcess(tmp_path / "d")
    proc.start()
    pub = Publisher(BrokerAddress("127.0.0.1", proc.port), timeout=10, max_inflight=10_000)
    try:
        for i in range(200):
            pub.publish("x/y", b"%d" % i)
        proc.kill9()

        def more() -> None:
            for i in range(5000):
                pub.publish("x/y", b"%d" % i)
            pub.flush()

        with pytest.raises(PublishError, match=r"lost|PUBACK"):
            more()
    finally:
        pub.close()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_rows_round_trip_through_the_broker(
    spark: Any, broker_process: BrokerProcess, data_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        IntegerType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    url = f"mqtt://127.0.0.1:{broker_process.port}"
    sub = _subscriber(broker_process.port, "out/#")
    try:
        schema = StructType(
            [
                StructField("topic", StringType()),
                StructField("payload", BinaryType()),
                StructField("qos", IntegerType()),
                StructField("retain", BooleanType()),
                StructField("headers", MapType(StringType(), StringType())),
            ]
        )
        data = [
            (f"out/dev{i % 4}", b"v%d" % i, 1, i == 0, {"n": str(i)} if i % 2 else None)
            for i in range(200)
        ]
        df = spark.createDataFrame(data, schema).repartition(3)
        df.write.format("jetmq").mode("append").option("url", url).save()
        got = _drain(sub, 200)
        assert sorted(bytes(m.payload) for m in got) == sorted(d[1] for d in data)
        by_payload = {bytes(m.payload): m for m in got}
        m7 = by_payload[b"v7"]
        assert m7.topic == "out/dev3"
        assert ("n", "7") in m7.properties.UserProperty
        assert sub.none_within(0.3)
        # a streaming query: a store's stream -> the broker
        st = Store.open(data_dir, sync="batch")
        st.create_stream({"name": "CMDS", "subjects": ["cmd.>"]})
        fill(st, "CMDS", [f"cmd.dev{i}" for i in range(50)], [b"c%d" % i for i in range(50)])
        st.close()
        q = (
            spark.readStream.format("jetmq")
            .option("path", str(data_dir))
            .load()
            .selectExpr("concat('out/', topic) AS topic", "payload")
            .writeStream.format("jetmq")
            .option("url", url)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(300)
        got = _drain(sub, 50)
        assert sorted(m.topic for m in got) == sorted(f"out/cmd/dev{i}" for i in range(50))
    finally:
        sub.disconnect()
    # what went through the broker is in its store: the retained message
    assert broker_process.terminate() == 0
    rows = (
        spark.read.format("jetmq")
        .option("path", str(broker_process.data_dir))
        .option("streams", "$MQTT_rmsgs")
        .load()
        .collect()
    )
    rows = [r for r in rows if not r.topic.startswith("$SYS/")]  # the broker's own $SYS tree
    assert [(r.topic, bytes(r.payload), r.qos, r.retain) for r in rows] == [
        ("out/dev0", b"v0", 1, True)
    ]
    storeread.close_all()


def test_sink_options_are_checked() -> None:
    from pipeline.options import OptionError

    with pytest.raises(OptionError, match="'url' is required"):
        parse_sink_options({})
    with pytest.raises(OptionError, match="mqtt://host:port"):
        parse_sink_options({"url": "http://x"})
    with pytest.raises(OptionError, match="qos"):
        parse_sink_options({"url": "mqtt://h", "qos": "3"})
    o = parse_sink_options({"url": "mqtt://u:p%40@h:1884"})
    assert o.address == BrokerAddress("h", 1884, "u", "p@")

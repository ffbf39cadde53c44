"""The ``jetmq`` source through a running broker (option ``url``): what MQTT clients
published, captured into a stream by the broker, read back by Spark over the JetStream
API, batch and streaming, on ``local[2]`` and on a standalone cluster."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from pipeline import netread
from pipeline.mqttpub import BrokerAddress
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho, props
from tests.pipeline.cluster import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _request(port: int, rest: str, body: dict[str, Any]) -> dict[str, Any]:
    link = netread.JsLink(BrokerAddress("127.0.0.1", port), timeout=30)
    try:
        return link.request(rest, body)
    finally:
        link.close()


def _publish_telemetry(port: int, n: int, start: int = 0) -> list[tuple[str, bytes]]:
    from paho.mqtt.packettypes import PacketTypes

    pub = Paho(port)
    pub.connect()
    sent = []
    try:
        for i in range(start, start + n):
            topic = f"tele/dev{i % 3}/temp"
            payload = json.dumps({"i": i}).encode()
            p = props(PacketTypes.PUBLISH, UserProperty=[("site", f"s{i % 2}")])
            pub.publish(topic, payload, qos=1, properties=p)
            sent.append((topic, payload))
    finally:
        pub.disconnect()
    return sent


@pytest.fixture
def telemetry(broker_process: BrokerProcess) -> tuple[str, list[tuple[str, bytes]]]:
    made = _request(
        broker_process.port,
        "STREAM/CREATE/TELEMETRY",
        {"name": "TELEMETRY", "subjects": ["tele.>"]},
    )
    assert made["config"]["name"] == "TELEMETRY", made
    sent = _publish_telemetry(broker_process.port, 250)
    return f"mqtt://127.0.0.1:{broker_process.port}", sent


@pytest.mark.timeout(300)
def test_a_batch_read_through_the_broker_equals_what_clients_published(
    spark: Any, telemetry: tuple[str, list[tuple[str, bytes]]]
) -> None:
    url, sent = telemetry
    df = (
        spark.read.format("jetmq")
        .option("url", url)
        .option("streams", "TELEMETRY")
        .option("maxRecordsPerPartition", "100")  # 3 partitions, each its own consumer
        .option("pullBatch", "32")  # several pull requests per partition, some complete
        .load()
    )
    rows = df.orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 251))
    assert [(r.topic, bytes(r.payload)) for r in rows] == sent
    assert {r.stream for r in rows} == {"TELEMETRY"}
    assert rows[0].subject == "tele.dev0.temp"
    assert rows[1].headers["site"] == "s1"
    assert rows[1].qos == 1
    assert rows[0].ts is not None
    sub = df.filter(df.seq > 240).count()
    assert sub == 10
    filtered = (
        spark.read.format("jetmq")
        .option("url", url)
        .option("streams", "TELEMETRY")
        .option("subjectFilter", "tele.dev1.>")
        .load()
    )
    assert filtered.count() == len([t for t, _ in sent if t.startswith("tele/dev1/")])
    # no consumer is left behind by the reads
    info = _request(int(url.rsplit(":", 1)[1]), "STREAM/INFO/TELEMETRY", {})
    assert info["state"]["consumer_count"] == 0


@pytest.mark.timeout(300)
def test_a_streaming_read_through_the_broker_resumes_from_its_checkpoint(
    spark: Any,
    telemetry: tuple[str, list[tuple[str, bytes]]],
    broker_process: BrokerProcess,
    tmp_path: pathlib.Path,
) -> None:
    url, sent = telemetry
    out = tmp_path / "out"

    def run() -> None:
        q = (
            spark.readStream.format("jetmq")
            .option("url", url)
            .option("streams", "TELEMETRY")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    run()
    sent += _publish_telemetry(broker_process.port, 40, start=250)
    run()
    rows = spark.read.parquet(str(out)).orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 291))
    assert [(r.topic, bytes(r.payload)) for r in rows] == sent


@pytest.mark.timeout(400)
def test_the_archive_job_reads_through_the_broker_on_a_standalone_cluster(
    telemetry: tuple[str, list[tuple[str, bytes]]], tmp_path: pathlib.Path
) -> None:
    url, sent = telemetry
    cluster = StandaloneCluster(tmp_path / "spark")
    master = cluster.start()
    try:
        out = tmp_path / "archive"
        got = subprocess.run(
            [sys.executable, "-m", "broker", "pipeline", "archive", "--stream", "TELEMETRY",
             "--to", str(out), "--url", url, "--master", master],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr[-3000:]
        assert "archived 250 messages of TELEMETRY" in got.stdout
    finally:
        cluster.stop()
    assert list((tmp_path / "spark" / "worker").glob("app-*/*/stderr")), "no executor ran"
    import pyarrow.parquet as pq

    table = pq.read_table(str(out), columns=["seq", "payload"])
    got_rows = sorted(
        zip(table.column("seq").to_pylist(), table.column("payload").to_pylist(), strict=True)
    )
    assert [s for s, _ in got_rows] == list(range(1, 251))
    assert [p for _, p in got_rows] == [p for _, p in sent]


@pytest.mark.timeout(120)
def test_bad_network_reads_are_one_clear_error(spark: Any, broker_process: BrokerProcess) -> None:
    url = f"mqtt://127.0.0.1:{broker_process.port}"
    with pytest.raises(Exception, match="stream 'NOPE' does not exist"):
        spark.read.format("jetmq").option("url", url).option("streams", "NOPE").load().count()
    with pytest.raises(Exception, match=r"cannot connect to mqtt://127\.0\.0\.1:1"):
        spark.read.format("jetmq").option("url", "mqtt://127.0.0.1:1").load().count()

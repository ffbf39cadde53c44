"""``jetmq pipeline archive`` and ``rollup``: complete, incremental, equal to plain Python."""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest

from pipeline import storeread
from pipeline.cli import _parser
from pipeline.jobs import archive, rollup
from store import Store
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho
from tests.pipeline.conftest import fill

T0 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
SEC = 10**9


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _jetmq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.timeout(120)
def test_missing_java_or_pyspark_is_exit_2_with_the_install_command(tmp_path: pathlib.Path) -> None:
    out = _jetmq(
        "archive", "--stream", "S", "--to", str(tmp_path), env=dict(os.environ, JAVA_HOME="/no")
    )
    assert out.returncode == 2
    assert "Java is not installed" in out.stderr
    code = (
        "import sys; sys.modules['pyspark'] = None; from broker.cli import main;"
        f" sys.exit(main(['pipeline', 'rollup', '--stream', 'S', '--schema', 'a int', '--to', {str(tmp_path)!r}]))"
    )
    out2 = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out2.returncode == 2
    assert "pip install 'jetmq[spark]'" in out2.stderr
    bad = _jetmq("rollup", "--stream", "S", "--schema", "a int", "--window", "1x", "--to", "d")
    assert bad.returncode == 2
    assert "--window '1x'" in bad.stderr


@pytest.mark.timeout(120)
def test_a_missing_data_dir_or_stream_is_one_line_before_spark_starts(
    tmp_path: pathlib.Path, data_dir: pathlib.Path
) -> None:
    with Store.open(data_dir, sync="batch") as st:
        st.create_stream({"name": "TELEMETRY", "subjects": ["tele.>"]})
    out = _jetmq("archive", "--stream", "T", "--to", str(tmp_path / "o"), "--path", str(data_dir))
    assert out.returncode == 1
    assert out.stderr == (
        f"jetmq pipeline archive: stream 'T' does not exist in {str(data_dir)!r}"
        " (streams there: TELEMETRY)\n"
    )
    out = _jetmq("archive", "--stream", "T", "--to", "o", "--path", str(tmp_path / "none"))
    assert out.returncode == 1
    assert "data directory" in out.stderr
    assert "does not exist" in out.stderr


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_archive_is_complete_and_incremental(
    spark: Any, data_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    clock = Clock()
    out = tmp_path / "archive"
    st = Store.open(data_dir, sync="batch", clock=clock)
    st.create_stream({"name": "TELEMETRY", "subjects": ["tele.>"]})
    st.create_stream({"name": "OTHER", "subjects": ["other.>"]})
    fill(st, "OTHER", ["other.x"] * 5, [b"o"] * 5)
    fill(st, "TELEMETRY", [f"tele.dev{i % 3}" for i in range(40)], [b"%d" % i for i in range(40)])
    clock.now += 86_400 * SEC  # the next day
    fill(st, "TELEMETRY", ["tele.dev0"] * 10, [b"late"] * 10)
    st.close()
    args = _parser().parse_args(
        ["archive", "--stream", "TELEMETRY", "--to", str(out), "--path", str(data_dir)]
    )
    assert archive.run(spark, args) == {"rows": 50, "skipped": 0, "batches": 1}
    assert archive.run(spark, args)["rows"] == 0  # nothing new, nothing written
    st = Store.open(data_dir, sync="batch", clock=clock)
    fill(st, "TELEMETRY", ["tele.dev1"] * 7, [b"new"] * 7)
    st.delete_msg("TELEMETRY", 52)  # removed before the archive read it
    st.close()
    assert archive.run(spark, args) == {"rows": 6, "skipped": 1, "batches": 1}
    got = spark.read.parquet(str(out))
    rows = got.orderBy("seq").collect()
    assert [r.seq for r in rows] == [*range(1, 52), *range(53, 58)]
    assert {r.stream for r in rows} == {"TELEMETRY"}
    assert rows[0].date == dt.date(2026, 1, 1)
    assert rows[45].date == dt.date(2026, 1, 2)
    assert rows[0].topic == "tele/dev0"
    assert bytes(rows[-1].payload) == b"new"
    dates = sorted(p.name for p in out.iterdir() if p.name.startswith("date="))
    assert dates == ["date=2026-01-01", "date=2026-01-02"]
    assert (out / "date=2026-01-02" / "topic=tele%2Fdev1").is_dir()
    storeread.close_all()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_rollup_equals_a_plain_python_computation(
    spark: Any, data_dir: pathlib.Path, tmp_path: pathlib.Path, broker_process: BrokerProcess
) -> None:
    clock = Clock()
    st = Store.open(data_dir, sync="batch", clock=clock)
    st.create_stream({"name": "TELEMETRY", "subjects": ["tele.>"]})
    sent: list[tuple[str, int, bytes]] = []  # topic, time ns, payload
    for i in range(300):
        clock.now = T0 + i * 2 * SEC + (i % 7) * 10**6  # 10 minutes, 1 m windows
        topic = f"tele.dev{i % 4}"
        if i % 50 == 13:
            payload = b"garbage{" if i % 100 == 13 else b'{"temp": '
        else:
            payload = json.dumps({"temp": (i * 37 % 101) / 4, "hum": i % 60, "unit": "C"}).encode()
        fill(st, "TELEMETRY", [topic], [payload])
        sent.append((topic.replace(".", "/"), clock.now, payload))
    st.close()
    out = tmp_path / "rollup"
    sub = Paho(broker_process.port)
    sub.connect()
    sub.subscribe("rollups", qos=1)
    args = _parser().parse_args(
        [
            "rollup",
            "--stream",
            "TELEMETRY",
            "--schema",
            "temp double, hum int, unit string",
            "--window",
            "1m",
            "--to",
            str(out),
            "--path",
            str(data_dir),
            "--publish",
            "rollups",
            "--url",
            f"mqtt://127.0.0.1:{broker_process.port}",
        ]
    )
    try:
        result = rollup.run(spark, args)
        published = [json.loads(sub.get(timeout=30).payload) for _ in range(result["windows"])]
    finally:
        sub.disconnect()
    expect: dict[tuple[str, dt.datetime], dict[str, Any]] = {}
    groups: dict[tuple[str, dt.datetime], list[dict[str, Any] | None]] = defaultdict(list)
    for topic, t, payload in sent:
        start = dt.datetime.fromtimestamp((t // (60 * SEC)) * 60, dt.UTC).replace(tzinfo=None)
        try:
            groups[(topic, start)].append(json.loads(payload))
        except ValueError:
            groups[(topic, start)].append(None)
    for key, items in groups.items():
        good = [x for x in items if x is not None]
        temps = [x["temp"] for x in good]
        hums = [x["hum"] for x in good]
        expect[key] = {
            "messages": len(good),
            "corrupt": len(items) - len(good),
            "temp_min": min(temps),
            "temp_max": max(temps),
            "temp_avg": sum(temps) / len(temps),
            "hum_min": min(hums),
            "hum_max": max(hums),
            "hum_avg": sum(hums) / len(hums),
        }
    rows = spark.read.parquet(str(out)).collect()
    got = {(r.topic, r.window_start): r.asDict() for r in rows}
    assert set(got) == set(expect)
    for key, want in expect.items():
        for col, value in want.items():
            assert got[key][col] == pytest.approx(value), (key, col)
    assert result == {"windows": len(expect), "messages": 294, "corrupt": 6}
    corrupt = spark.read.parquet(str(out / "_corrupt")).orderBy("seq").collect()
    assert [r.seq for r in corrupt] == [i + 1 for i in range(300) if i % 50 == 13]
    assert {r._corrupt for r in corrupt} == {"garbage{", '{"temp": '}
    assert sorted((p["topic"], p["messages"]) for p in published) == sorted(
        (k[0], v["messages"]) for k, v in expect.items()
    )
    storeread.close_all()


def test_skipped_sequences_come_from_the_offsets_advanced_minus_the_rows_read() -> None:
    def src(start: dict[str, int] | None, end: dict[str, int], rows: int) -> dict[str, Any]:
        return {
            "startOffset": None if start is None else json.dumps(start),
            "endOffset": json.dumps(end),
            "numInputRows": rows,
        }

    progress = [
        {"sources": [src(None, {"S": 40}, 30)]},  # first batch: no start offset, not counted
        {"sources": [src({"S": 40}, {"S": 100}, 50)]},  # 10 removed before they were read
        {"sources": [src({"S": 100}, {"S": 100}, 0)]},
        {"sources": [src({"S": 100}, {"S": 110, "NEW": 5}, 15)]},  # a new stream: not counted
    ]
    assert archive.skipped_sequences(progress) == 10

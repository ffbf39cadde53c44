"""``jetmq pipeline archive`` and ``rollup``: complete, incremental, equal to plain Python."""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import signal
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest

from pipeline import storeread
from pipeline.cli import _parser
from pipeline.jobs import archive, rollstate, rollup
from store import Store
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho
from tests.pipeline.cluster import StandaloneCluster
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
    for i in range(300):  # 10 minutes, 1 m windows
        _telemetry(st, clock, sent, i)
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
    expect = _expected_windows(sent)
    _assert_windows(spark, out, expect)
    assert result == {
        "windows": len(expect),
        "messages": 294,
        "corrupt": 6,
        "new": 300,
        "touched": len(expect),
    }
    corrupt = spark.read.parquet(str(out / "_corrupt")).orderBy("seq").collect()
    assert [r.seq for r in corrupt] == [i + 1 for i in range(300) if i % 50 == 13]
    assert {r._corrupt for r in corrupt} == {"garbage{", '{"temp": '}
    assert sorted((p["topic"], p["messages"]) for p in published) == sorted(
        (k[0], v["messages"]) for k, v in expect.items()
    )
    storeread.close_all()


def _expected_windows(
    sent: list[tuple[str, int, bytes]], window_s: int = 60
) -> dict[tuple[str, dt.datetime], dict[str, Any]]:
    """The roll-up computed in plain Python: (topic, window start) -> column values."""
    groups: dict[tuple[str, dt.datetime], list[dict[str, Any] | None]] = defaultdict(list)
    for topic, t, payload in sent:
        start_s = (t // (window_s * SEC)) * window_s
        start = dt.datetime.fromtimestamp(start_s, dt.UTC).replace(tzinfo=None)
        try:
            groups[(topic, start)].append(json.loads(payload))
        except ValueError:
            groups[(topic, start)].append(None)
    expect: dict[tuple[str, dt.datetime], dict[str, Any]] = {}
    for key, items in groups.items():
        good = [x for x in items if x is not None]
        want: dict[str, Any] = {"messages": len(good), "corrupt": len(items) - len(good)}
        for f in ("temp", "hum"):
            vals = [x[f] for x in good]
            want[f"{f}_min"] = min(vals) if vals else None
            want[f"{f}_max"] = max(vals) if vals else None
            want[f"{f}_avg"] = sum(vals) / len(vals) if vals else None
        expect[key] = want
    return expect


def _telemetry(st: Store, clock: Clock, sent: list[tuple[str, int, bytes]], i: int) -> None:
    """Message ``i`` of the roll-up tests: every 2 s, 4 devices, a few bad payloads."""
    clock.now = T0 + i * 2 * SEC + (i % 7) * 10**6
    topic = f"tele.dev{i % 4}"
    if i % 50 == 13:
        payload = b"garbage{" if i % 100 == 13 else b'{"temp": '
    else:
        payload = json.dumps({"temp": (i * 37 % 101) / 4, "hum": i % 60, "unit": "C"}).encode()
    fill(st, "TELEMETRY", [topic], [payload])
    sent.append((topic.replace(".", "/"), clock.now, payload))


def _stored_telemetry(data_dir: pathlib.Path, n: int) -> tuple[Clock, list[tuple[str, int, bytes]]]:
    """A TELEMETRY stream holding messages 0..n-1 of :func:`_telemetry`; the clock and what
    was sent (topic, time, payload)."""
    clock = Clock()
    sent: list[tuple[str, int, bytes]] = []
    with Store.open(data_dir, sync="batch", clock=clock) as st:
        st.create_stream({"name": "TELEMETRY", "subjects": ["tele.>"]})
        for i in range(n):
            _telemetry(st, clock, sent, i)
    return clock, sent


def _assert_windows(spark: Any, out: pathlib.Path, expect: dict[Any, dict[str, Any]]) -> None:
    got = {(r.topic, r.window_start): r.asDict() for r in spark.read.parquet(str(out)).collect()}
    assert set(got) == set(expect)
    for key, want in expect.items():
        for col, value in want.items():
            assert got[key][col] == pytest.approx(value), (key, col)


def _rollup_args(data_dir: pathlib.Path, out: pathlib.Path, *extra: str) -> Any:
    return _parser().parse_args(
        [
            "rollup",
            "--stream",
            "TELEMETRY",
            "--schema",
            "temp double, hum int, unit string",
            "--to",
            str(out),
            "--path",
            str(data_dir),
            *extra,
        ]
    )


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_rollup_runs_are_incremental_and_windows_outlive_retention(
    spark: Any, data_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    clock, sent = _stored_telemetry(data_dir, 100)  # 0:00 - 3:18
    out = tmp_path / "rollup"
    args = _rollup_args(data_dir, out)
    first = rollup.run(spark, args)
    assert first["new"] == 100
    assert first["touched"] == first["windows"] == len(_expected_windows(sent))
    assert rollup.run(spark, args)["new"] == 0  # nothing new: nothing read, nothing changed
    st = Store.open(data_dir, sync="batch", clock=clock)
    for i in range(100, 160):  # 3:20 - 5:18: the 3:00 windows again, and new ones
        _telemetry(st, clock, sent, i)
    st.purge_stream("TELEMETRY", seq=90)  # retention took most of what run 1 read
    st.close()
    second = rollup.run(spark, args)
    expect = _expected_windows(sent)
    assert second["new"] == 60
    new_windows = _expected_windows(sent[100:])
    assert second["touched"] == len(new_windows)
    assert second["windows"] == len(expect)
    assert second["messages"] == sum(w["messages"] for w in expect.values())
    _assert_windows(spark, out, expect)  # the purged messages still count in their windows
    corrupt = spark.read.parquet(str(out / "_corrupt")).orderBy("seq").collect()
    assert [r.seq for r in corrupt] == [i + 1 for i in range(160) if i % 50 == 13]
    assert sorted({r.gen for r in corrupt}) == [1, 2]

    changed = _rollup_args(data_dir, out, "--window", "5m")
    with pytest.raises(rollstate.StateError, match=r"window .1m., not .5m..*--rebuild"):
        rollup.run(spark, changed)
    rebuilt = rollup.run(spark, _rollup_args(data_dir, out, "--window", "5m", "--rebuild"))
    assert rebuilt["new"] == 160 - 89  # what the stream still holds
    _assert_windows(spark, out, _expected_windows(sent[89:], window_s=300))
    storeread.close_all()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_rollup_follow_emits_windows_past_the_watermark_and_counts_late_data(
    spark: Any, data_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    clock, sent = _stored_telemetry(data_dir, 150)  # 0:00 - 4:58
    out = tmp_path / "follow"
    args = _rollup_args(data_dir, out, "--follow", "--watermark", "1m", "--trigger", "1s")
    q, corrupt = rollup.follow(spark, args)
    try:
        q.processAllAvailable()
        assert rollup.late_groups(q.recentProgress) == 0
        # watermark 4:58 - 1m: the windows ending by 3:58 are final and written
        final = {k: v for k, v in _expected_windows(sent).items() if k[1].minute < 3}
        _assert_windows(spark, out, final)
        st = Store.open(data_dir, sync="batch", clock=clock)
        clock.now = T0 + 30 * SEC  # stored now, but stamped long behind the watermark
        fill(st, "TELEMETRY", ["tele.dev0"] * 3, [b'{"temp": 1}'] * 3)
        for i in range(150, 240):  # up to 7:58
            _telemetry(st, clock, sent, i)
        st.close()
        q.processAllAvailable()
        final = {k: v for k, v in _expected_windows(sent).items() if k[1].minute < 6}
        _assert_windows(spark, out, final)  # the late messages changed no window
        # Spark counts late data after its partial aggregation, not per message
        assert 1 <= rollup.late_groups(q.recentProgress) <= 3
        # the payloads that did not parse are kept, as the batch runs keep them
        corrupt.processAllAvailable()
        bad = spark.read.parquet(str(out / "_corrupt")).orderBy("seq").collect()
        # (seqs 151-153: the three late messages, stored before message 150)
        want = [i + 1 if i < 150 else i + 4 for i in range(240) if i % 50 == 13]
        assert [r.seq for r in bad] == want
        assert {r._corrupt for r in bad} == {"garbage{", '{"temp": '}
        assert {r.topic for r in bad} <= {f"tele/dev{d}" for d in range(4)}
    finally:
        q.stop()
        corrupt.stop()
    with pytest.raises(rollstate.StateError, match="holds a --follow roll-up"):
        rollup.run(spark, _rollup_args(data_dir, out))
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


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(300)
def test_rollup_follow_from_the_command_line_reports_batches_and_stops_on_sigterm(
    data_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    _stored_telemetry(data_dir, 60)
    out = tmp_path / "follow"
    cmd = [sys.executable, "-m", "broker", "pipeline", "rollup", "--stream", "TELEMETRY"]
    cmd += ["--schema", "temp double, hum int", "--to", str(out), "--path", str(data_dir)]
    cmd += ["--follow", "--trigger", "1s", "--master", "local[1]"]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the first micro-batch's line
            assert line.startswith("rollup TELEMETRY: batch 0, 60 messages;"), line
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 0
        finally:
            proc.kill()
    assert (out / "_checkpoint").is_dir()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(400)
def test_archive_runs_unchanged_on_a_standalone_spark_cluster(
    data_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    with Store.open(data_dir, sync="batch") as st:
        st.create_stream({"name": "TELEMETRY", "subjects": ["tele.>"]})
        fill(st, "TELEMETRY", [f"tele.dev{i % 5}" for i in range(3000)], [b"x"] * 3000)
    cluster = StandaloneCluster(tmp_path / "spark")
    url = cluster.start()
    try:
        out = tmp_path / "archive"
        got = _jetmq(
            "archive", "--stream", "TELEMETRY", "--to", str(out), "--path", str(data_dir),
            "--master", url,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr[-3000:]
        assert "archived 3000 messages of TELEMETRY" in got.stdout
    finally:
        cluster.stop()
    executor_logs = list((tmp_path / "spark" / "worker").glob("app-*/*/stderr"))
    assert executor_logs, "no executor ran on the worker"
    storeread.close_all()
    rows = pyarrow_rows(out)
    assert sorted(rows) == list(range(1, 3001))


def pyarrow_rows(out: pathlib.Path) -> list[int]:
    import pyarrow.parquet as pq

    table = pq.read_table(str(out), columns=["seq"])
    return [int(v) for v in table.column("seq").to_pylist()]

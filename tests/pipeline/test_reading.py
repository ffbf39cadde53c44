"""The source's parts without Spark: options, planning, record decoding, LMDB reads."""

from __future__ import annotations

import datetime as dt
import pathlib

import pytest

from broker.subjects import topic_to_subject
from pipeline import batches, plan, pushdown, storeread
from pipeline.options import OptionError, SeqBound, parse_source_options
from pipeline.subjects import SubjectFilter, subject_to_topic
from store import Store, keys
from tests.pipeline.conftest import fill
from tests.store.conftest import start_child

pytestmark = pytest.mark.timeout(60)

TOPICS = ["a/b/c", "/a", "a/", "a//b", "a.b/c", "x", "//", "sensors/dev.1/temp", "ünï/ç"]


@pytest.mark.parametrize("topic", TOPICS)
def test_subject_to_topic_inverts_the_brokers_conversion(topic: str) -> None:
    assert subject_to_topic(topic_to_subject(topic)) == topic


def test_subject_filter_wildcards() -> None:
    f = SubjectFilter("orders.*.eu.>")
    assert f.matches("orders.x.eu.a")
    assert f.matches("orders.x.eu.a.b")
    assert not f.matches("orders.x.eu")
    assert not f.matches("orders.x.us.a")
    assert SubjectFilter("a.*").matches("a.b")
    assert not SubjectFilter("a.*").matches("a.b.c")
    with pytest.raises(ValueError, match="must be the last"):
        SubjectFilter("a.>.b")


def test_options_are_checked_with_clear_errors() -> None:
    with pytest.raises(OptionError, match=r"'path'.*required"):
        parse_source_options({})
    with pytest.raises(OptionError, match=r"either option 'path'.*or option 'url'"):
        parse_source_options({"url": "mqtt://127.0.0.1:1883", "path": "d"})
    with pytest.raises(OptionError, match="jetmq source: option 'url' must look like mqtt://"):
        parse_source_options({"url": "http://127.0.0.1:1883"})
    assert parse_source_options({"url": "mqtt://h:1"}).url == "mqtt://h:1"
    with pytest.raises(OptionError, match="startingSequence"):
        parse_source_options({"path": "x", "startingSequence": "[1]"})
    with pytest.raises(OptionError, match=r"maxRecordsPerPartition.*at least 1"):
        parse_source_options({"path": "x", "maxRecordsPerPartition": "0"})
    with pytest.raises(OptionError, match="includeHeaders"):
        parse_source_options({"path": "x", "includeHeaders": "maybe"})
    with pytest.raises(OptionError, match="subjectFilter"):
        parse_source_options({"path": "x", "subjectFilter": "a..b"})
    o = parse_source_options(
        {
            "path": "d",
            "streams": "B, A",
            "startingSequence": '{"A": 5}',
            "maxRecordsPerTrigger": "7",
        }
    )
    assert o.streams == ("B", "A")
    assert o.starting == SeqBound("map", (("A", 5),))
    assert o.max_records_per_trigger == 7


def _meta(name: str, first: int, last: int, sid: int = 1) -> storeread.StreamMeta:
    return storeread.StreamMeta(name, sid, first, last, last - first + 1, ())


def test_offsets_advance_capped_and_follow_streams_that_come_and_go() -> None:
    a, b = _meta("A", 1, 100), _meta("B", 11, 20, 2)
    start = plan.initial_offsets([a, b], SeqBound("earliest"))
    assert start == {"A": 0, "B": 10}
    assert plan.initial_offsets([a, b], SeqBound("latest")) == {"A": 100, "B": 20}
    assert plan.initial_offsets([a, b], SeqBound("map", (("A", 40),))) == {"A": 39, "B": 10}
    # maxRecordsPerTrigger: the advance is shared out in name order
    assert plan.latest_offsets(start, [a, b], 105) == {"A": 100, "B": 15}
    assert plan.latest_offsets(start, [a, b], None) == {"A": 100, "B": 20}
    # availableNow snapshot: never past it; a stream created after it does not advance
    c = _meta("C", 1, 9, 3)
    assert plan.latest_offsets(start, [a, b, c], None, {"A": 50, "B": 20}) == {
        "A": 50,
        "B": 20,
        "C": 0,
    }
    # a stream created after the start offset starts at its first seq; a deleted one leaves
    assert plan.latest_offsets({"A": 100, "GONE": 4}, [a, c], None) == {"A": 100, "C": 9}
    # an offset never moves back
    assert plan.latest_offsets({"A": 150}, [a], None) == {"A": 150}


def test_ranges_split_by_partition_size_and_narrow_to_pushed_seqs() -> None:
    metas = {"A": _meta("A", 1, 25), "B": _meta("B", 1, 3, 2)}
    rngs = plan.ranges({"A": 0, "B": 0}, {"A": 25, "B": 3}, metas, 10)
    assert [(r.stream, r.first, r.last) for r in rngs] == [
        ("A", 1, 10),
        ("A", 11, 20),
        ("A", 21, 25),
        ("B", 1, 3),
    ]
    rngs = plan.ranges({"A": 0}, {"A": 25, "GONE": 9}, metas, 10, seq_min=8, seq_max=12)
    assert [(r.first, r.last) for r in rngs] == [(8, 12)]
    assert plan.ranges({"A": 25}, {"A": 25}, metas, 10) == []


def _rec(subject: str, payload: bytes, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    return keys.pack_msg(1_700_000_000_123_456_789, subject, keys.encode_headers(headers), payload)


def test_records_decode_to_arrow_rows() -> None:
    rows = [
        (keys.msg_key(1, 5), _rec("a.b", b"plain")),
        (
            keys.msg_key(1, 7),
            _rec(
                "$MQTT.rmsgs.x",
                b"\x00bin",
                (
                    ("Mqtt-Topic", '"dev/1/t"'),
                    ("Mqtt-Qos", "1"),
                    ("Mqtt-Retain", "1"),
                    ("k", "first"),
                    ("k", "second"),
                ),
            ),
        ),
    ]
    batch = batches.to_batch("S", rows)
    assert batch.schema == batches.arrow_schema()
    got = batch.to_pylist()
    assert got[0]["stream"] == "S"
    assert got[0]["seq"] == 5
    assert got[0]["topic"] == "a/b"
    assert got[0]["headers"] == []
    assert got[0]["qos"] is None
    assert got[0]["retain"] is None
    assert got[0]["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)
    assert got[1]["topic"] == "dev/1/t"
    assert got[1]["payload"] == b"\x00bin"
    assert got[1]["qos"] == 1
    assert got[1]["retain"] is True
    assert dict(got[1]["headers"])["k"] == "first"  # a repeated name keeps its first value
    kept = batches.to_batch("S", rows, keep=batches.RowFilter(subject=lambda s: s == "a.b"))
    assert kept.column("seq").to_pylist() == [5]
    assert batches.to_batch("S", rows, keep=batches.RowFilter(ts_min_ns=2 * 10**18)) is None
    lean = batches.to_batch("S", rows, include_headers=False)
    assert lean.schema == batches.arrow_schema(include_headers=False)
    assert lean.column("topic").to_pylist() == ["a/b", "dev/1/t"]
    bad = [(keys.msg_key(1, 1), b"\x09" + rows[0][1][1:])]
    with pytest.raises(keys.RecordError, match="version 9"):
        batches.to_batch("S", bad)


def test_pushed_filters_become_bounds() -> None:
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        In,
        LessThanOrEqual,
        StringContains,
        StringStartsWith,
    )

    t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    fs = [
        EqualTo(("stream",), "A"),
        GreaterThan(("seq",), 10),
        LessThanOrEqual(("seq",), 20),
        In(("subject",), ("x.a", "x.b")),
        StringStartsWith(("subject",), "x."),
        GreaterThan(("ts",), t),
        StringContains(("topic",), "q"),
    ]
    p, left = pushdown.push(pushdown.Pushed(), fs)
    assert p.streams == frozenset({"A"})
    assert (p.seq_min, p.seq_max) == (11, 20)
    assert p.ts_min_ns == 1_704_067_200 * 10**9
    pred = p.subject_predicate(None)
    assert pred is not None
    assert pred("x.a")
    assert not pred("x.c")
    assert left == [fs[5], fs[6]]  # ts is re-checked by Spark; topic is not ours


def test_missing_or_foreign_data_dir_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(storeread.SourceError, match="does not exist"):
        storeread.list_streams(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(storeread.SourceError, match=r"no data.mdb"):
        storeread.list_streams(str(tmp_path / "empty"))


def test_scan_skips_gaps_and_reads_while_a_writer_appends(
    store: Store, data_dir: pathlib.Path
) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    fill(store, "S", [f"s.{i % 7}" for i in range(3000)], [b"%d" % i for i in range(3000)])
    for seq in (1, 500, 501, 2999):
        store.delete_msg("S", seq)
    store.close()
    path = str(data_dir)
    with start_child(
        "-m",
        "tests.pipeline.writer_child",
        path,
        "S",
        "s.w",
        "500",
        "100000",
        stdin=True,
        stderr=False,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            assert child.stdout.readline().strip() == "busy"
            meta = storeread.list_streams(path)["S"]
            assert meta.first_seq == 2
            assert meta.last_seq > 3000
            assert storeread.count_stored(path, meta.sid, 1, 3000) == 2996
            for _ in range(3):  # the map may grow meanwhile: scans go on
                seqs = [
                    keys.split_msg_key(k)[1]
                    for chunk in storeread.scan(path, meta.sid, 1, 3000, 256)
                    for k, _ in chunk
                ]
                assert seqs == [s for s in range(1, 3001) if s not in (1, 500, 501, 2999)]
            assert storeread.list_streams(path)["S"].last_seq > meta.last_seq
        finally:
            assert child.stdin is not None
            child.stdin.close()
            assert child.wait(timeout=30) == 0
            storeread.close_all()


@pytest.mark.parametrize("shapes", [1, 3, 40])
def test_subjects_and_payloads_are_cut_right_whatever_the_record_shapes(shapes: int) -> None:
    """One shape (one Arrow slice), a few (grouped slices), many (sliced in Python)."""
    rows = []
    for i in range(200):
        subject = "s." + "x" * (i % shapes)
        hdrs = (("h", "v" * (i % 2)),) if shapes == 3 and i % 3 == 0 else ()
        payload = bytes([i % 256]) * (i % 11)
        rows.append(
            (keys.msg_key(1, i + 1), keys.pack_msg(i, subject, keys.encode_headers(hdrs), payload))
        )
    batch = batches.to_batch("S", rows)
    want = [keys.unpack_msg(v) for _, v in rows]
    assert batch.column("subject").to_pylist() == [w[1] for w in want]
    assert batch.column("payload").to_pylist() == [w[3] for w in want]
    assert batch.column("seq").to_pylist() == list(range(1, 201))

"""Stream semantics of spec §1.4, §1.5 and §1.8, one rule per test, LMDB on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from store import JetStreamError, PubAck, Publish, Store, StreamConfig
from store.details import SUBJECTS_PAGE, Paged
from store.models import format_time, parse_time
from store.subjects import literal_prefix
from tests.store.conftest import SEC, T0, Events, FakeClock


def _err(fn: Any, *args: Any, **kw: Any) -> JetStreamError:
    with pytest.raises(JetStreamError) as ei:
        fn(*args, **kw)
    return ei.value


def _pub(store: Store, subject: str, payload: bytes = b"x", **headers: str) -> PubAck:
    hdrs = tuple((k.replace("_", "-"), v) for k, v in headers.items())
    ack = store.publish(subject, payload, hdrs)
    assert ack is not None
    return ack


def _stream(store: Store, **cfg: Any) -> None:
    cfg.setdefault("name", "S")
    cfg.setdefault("subjects", ["s.>"])
    store.create_stream(cfg)


# -- config ----------------------------------------------------------------------------------


def test_defaults_are_filled_as_nats_does(store: Store) -> None:
    info = store.create_stream({"name": "ORDERS"})
    cfg = info.to_wire()["config"]
    assert cfg["subjects"] == ["ORDERS"]
    assert cfg["retention"] == "limits"
    assert cfg["max_msgs"] == -1
    assert cfg["max_bytes"] == -1
    assert cfg["max_age"] == 0
    assert cfg["max_msg_size"] == -1
    assert cfg["duplicate_window"] == 120 * SEC
    assert cfg["num_replicas"] == 1
    assert cfg["discard"] == "old"
    assert cfg["consumer_limits"] == {}
    state = info.to_wire()["state"]
    assert state == {
        "messages": 0,
        "bytes": 0,
        "first_seq": 0,
        "first_ts": "0001-01-01T00:00:00Z",
        "last_seq": 0,
        "last_ts": "0001-01-01T00:00:00Z",
        "consumer_count": 0,
    }


def test_negative_limits_mean_unlimited_as_nats_server_reads_them() -> None:
    cfg = StreamConfig.from_wire(
        {"name": "A", "max_msgs": -5, "max_bytes": -2, "max_msgs_per_subject": -9}
    )
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_msgs_per_subject) == (-1, -1, -1)


def test_zero_limits_mean_unlimited_and_dupe_window_follows_max_age() -> None:
    cfg = StreamConfig.from_wire({"name": "A", "max_msgs": 0, "max_age": 10 * SEC})
    assert cfg.max_msgs == -1
    assert cfg.duplicate_window == 10 * SEC


@pytest.mark.parametrize(
    ("body", "err_code"),
    [
        ({"name": "a.b"}, 10052),
        ({"name": "a b"}, 10052),
        ({"name": ""}, 10052),
        ({"name": "A", "subjects": ["a..b"]}, 10052),
        ({"name": "A", "subjects": ["a.>.b"]}, 10052),
        ({"name": "A", "subjects": ["a.*", "a.b"]}, 10052),
        ({"name": "A", "subjects": [">"]}, 10052),
        ({"name": "A", "subjects": ["$JS.API.>"]}, 10052),
        ({"name": "A", "max_age": 1000}, 10052),
        ({"name": "A", "max_age": 10 * SEC, "duplicate_window": 20 * SEC}, 10052),
        ({"name": "A", "num_replicas": 3}, 10074),
        ({"name": "A", "retention": "bogus"}, 10025),  # nats-server's JSON decoding error
        ({"name": "A", "num_replicas": -1}, 10133),
        ({"name": "A", "first_seq": -1}, 10025),
        ({"name": "A", "discard_new_per_subject": True}, 10052),
        ({"name": "A", "allow_rollup_hdrs": True, "deny_purge": True}, 10052),
        ({"name": "A", "sealed": True}, 10052),
        ({"subjects": ["x"]}, 10052),
        ('{"name": ', 10025),
    ],
)
def test_invalid_configs_are_refused_and_change_nothing(
    store: Store, body: Any, err_code: int
) -> None:
    e = _err(store.create_stream, body)
    assert e.err_code == err_code
    assert store.stream_names() == []


def test_recreate_identical_is_idempotent_and_different_is_10058(store: Store) -> None:
    _stream(store)
    _stream(store)
    assert _err(_stream, store, max_msgs=5).err_code == 10058


def test_subject_overlap_between_streams_is_10065(store: Store) -> None:
    _stream(store, name="A", subjects=["a.*"])
    assert _err(_stream, store, name="B", subjects=["a.b"]).err_code == 10065
    assert _err(_stream, store, name="C", subjects=[">"], no_ack=True).err_code == 10065
    _stream(store, name="D", subjects=["a.b.c"])  # a.* does not match three tokens
    assert store.stream_names() == ["A", "D"]
    assert store.stream_names(subject="a.x") == ["A"]


def test_update_rules(store: Store) -> None:
    _stream(store, deny_delete=True)
    base = {"name": "S", "subjects": ["s.>"], "deny_delete": True}
    assert _err(store.update_stream, {**base, "storage": "memory"}).err_code == 10052
    assert _err(store.update_stream, {**base, "retention": "workqueue"}).err_code == 10052
    assert _err(store.update_stream, {**base, "deny_delete": False}).err_code == 10052
    assert _err(store.update_stream, {"name": "X"}).err_code == 10059
    info = store.update_stream({**base, "max_msgs": 2, "description": "d"})
    assert info.config.max_msgs == 2
    store.update_stream({**base, "sealed": True})
    assert _err(store.update_stream, base).err_code == 10052


def test_update_applies_tighter_limits(store: Store) -> None:
    _stream(store)
    for i in range(5):
        _pub(store, f"s.{i}")
    store.update_stream({"name": "S", "subjects": ["s.>"], "max_msgs": 2})
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (2, 4, 5)


# -- limits ----------------------------------------------------------------------------------


def test_max_msgs_discard_old_at_limit_and_limit_plus_one(store: Store) -> None:
    _stream(store, max_msgs=3)
    for i in range(3):
        _pub(store, "s.a", bytes([i]))
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (3, 1, 3)
    _pub(store, "s.a", b"\x03")
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (3, 2, 4)


def test_max_msgs_discard_new_rejects_with_10077(store: Store) -> None:
    _stream(store, max_msgs=2, discard="new")
    _pub(store, "s.a")
    _pub(store, "s.a")
    e = _err(_pub, store, "s.a")
    assert (e.err_code, e.code, e.description) == (10077, 503, "maximum messages exceeded")
    assert store.stream_state("S").last_seq == 2


def test_max_bytes_old_and_new(store: Store) -> None:
    per = 22 + 3 + 10 + 8
    _stream(store, max_bytes=per * 2)
    for _ in range(3):
        _pub(store, "s.a", bytes(10))
    st = store.stream_state("S")
    assert (st.messages, st.bytes, st.first_seq) == (2, per * 2, 2)
    _stream(store, name="N", subjects=["n.>"], max_bytes=per * 2, discard="new")
    _pub(store, "n.a", bytes(10))
    _pub(store, "n.a", bytes(10))
    assert _err(_pub, store, "n.a", bytes(10)).description == "maximum bytes exceeded"


def test_a_message_larger_than_max_bytes_is_acknowledged_and_gone(
    store: Store, events: Events
) -> None:
    """As nats-server 2.15.1 (measured): discard old removes down to no message at all,
    the new one included; a consumer counts nothing and delivers nothing."""
    per = 22 + 3 + 10 + 8
    _stream(store, max_bytes=per + 5)
    store.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit"})
    assert _pub(store, "s.a", bytes(10)).seq == 1
    assert _pub(store, "s.a", bytes(50)) == PubAck("S", 2)
    st = store.stream_state("S")
    assert (st.messages, st.bytes, st.first_seq, st.last_seq) == (0, 0, 3, 2)
    assert store.consumer_info("S", "c").num_pending == 0
    store.pull("S", "c", "inbox", batch=5, no_wait=True)
    assert not [e for e in events.take() if type(e).__name__ == "Delivery"]
    assert _pub(store, "s.a", bytes(10)).seq == 3
    assert store.consumer_info("S", "c").num_pending == 1


def test_update_with_discard_new_removes_only_per_subject_excess(store: Store) -> None:
    """As nats-server 2.15.1 (measured): with discard new, lower max_msgs / max_bytes
    remove nothing (appends are refused until the stream is under them), a lower
    max_msgs_per_subject removes each subject's oldest."""
    cfg: dict[str, Any] = {"name": "S", "subjects": ["s.>"], "discard": "new"}
    _stream(store, **cfg)
    for s in ("s.a", "s.a", "s.b", "s.a", "s.b"):
        _pub(store, s)
    info = store.update_stream({**cfg, "max_msgs": 2, "max_bytes": 50})
    assert (info.state.messages, info.state.first_seq) == (5, 1)
    assert _err(_pub, store, "s.c").description == "maximum messages exceeded"
    info = store.update_stream({**cfg, "max_msgs_per_subject": 1})
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (2, 4, 5)


def test_max_msgs_per_subject_drops_oldest_of_that_subject(store: Store) -> None:
    _stream(store, max_msgs_per_subject=2, discard="new")
    for s in ("s.a", "s.b", "s.a", "s.a"):
        _pub(store, s)
    st = store.stream_info("S", subjects_filter=">").state
    assert st.subjects == {"s.a": 2, "s.b": 1}
    assert (st.messages, st.first_seq, st.num_deleted) == (3, 2, None)
    with pytest.raises(JetStreamError):
        store.get_msg("S", 1)


def test_discard_new_per_subject_rejects(store: Store) -> None:
    _stream(store, max_msgs_per_subject=1, discard="new", discard_new_per_subject=True)
    _pub(store, "s.q.1")
    e = _err(_pub, store, "s.q.1")
    assert e.description == "maximum messages per subject exceeded"
    _pub(store, "s.q.2")


def test_max_msg_size_counts_headers_and_payload(store: Store) -> None:
    _stream(store, max_msg_size=10)
    _pub(store, "s.a", bytes(10))
    assert _err(_pub, store, "s.a", bytes(11)).err_code == 10054
    assert _err(_pub, store, "s.a", b"", X="1").err_code == 10054


def test_max_age_expires_on_tick(store: Store, clock: FakeClock) -> None:
    _stream(store, max_age=10 * SEC)
    _pub(store, "s.a")
    clock.advance(5 * SEC)
    _pub(store, "s.b")
    assert store.next_deadline() == T0 + 10 * SEC
    store.tick(T0 + 10 * SEC).result(timeout=10)
    st = store.stream_state("S")
    assert (st.messages, st.first_seq) == (1, 2)
    store.tick(T0 + 15 * SEC).result(timeout=10)
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (0, 3, 2)
    assert st.first_ts == "0001-01-01T00:00:00Z"
    assert store.next_deadline() is None


# -- headers ---------------------------------------------------------------------------------


def test_dedupe_window(store: Store, clock: FakeClock) -> None:
    _stream(store, duplicate_window=SEC)
    a = _pub(store, "s.a", Nats_Msg_Id="m1")
    b = _pub(store, "s.a", Nats_Msg_Id="m1")
    assert (a.seq, a.duplicate, b.seq, b.duplicate) == (1, False, 1, True)
    assert store.stream_state("S").last_seq == 1
    clock.advance(SEC)
    c = _pub(store, "s.a", Nats_Msg_Id="m1")
    assert (c.seq, c.duplicate) == (2, False)


def test_dedupe_survives_restart(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "d", clock=clock) as s:
        _stream(s)
        _pub(s, "s.a", Nats_Msg_Id="x")
    with Store.open(tmp_path / "d", clock=clock) as s:
        assert _pub(s, "s.a", Nats_Msg_Id="x").duplicate


def test_expected_stream(store: Store) -> None:
    _stream(store)
    assert _err(_pub, store, "s.a", Nats_Expected_Stream="OTHER").err_code == 10060
    _pub(store, "s.a", Nats_Expected_Stream="S")


def test_expected_last_sequence(store: Store) -> None:
    _stream(store)
    _pub(store, "s.a", Nats_Expected_Last_Sequence="0")
    e = _err(_pub, store, "s.a", Nats_Expected_Last_Sequence="0")
    assert (e.err_code, e.description) == (10071, "wrong last sequence: 1")
    _pub(store, "s.a", Nats_Expected_Last_Sequence="1")


def test_expected_last_subject_sequence_is_kv_compare_and_swap(store: Store) -> None:
    _stream(store)
    _pub(store, "s.k", Nats_Expected_Last_Subject_Sequence="0")
    _pub(store, "s.other")
    e = _err(_pub, store, "s.k", Nats_Expected_Last_Subject_Sequence="0")
    assert e.description == "wrong last sequence: 1"
    _pub(store, "s.k", Nats_Expected_Last_Subject_Sequence="1")
    # Evaluated against another (wildcard) subject.
    _pub(
        store,
        "s.k",
        Nats_Expected_Last_Subject_Sequence="3",
        Nats_Expected_Last_Subject_Sequence_Subject="s.*",
    )
    assert (
        _err(_pub, store, "s.k", Nats_Expected_Last_Subject_Sequence_Subject="s.k").err_code
        == 10193
    )


def test_expected_last_msg_id(store: Store) -> None:
    _stream(store)
    _pub(store, "s.a")
    e = _err(_pub, store, "s.a", Nats_Expected_Last_Msg_Id="a")
    assert e.description == "wrong last msg ID: "
    _pub(store, "s.a", Nats_Msg_Id="a")
    _pub(store, "s.a", Nats_Expected_Last_Msg_Id="a")


def test_rollup_sub_and_all(store: Store) -> None:
    _stream(store, allow_rollup_hdrs=True)
    for s in ("s.a", "s.b", "s.a", "s.b"):
        _pub(store, s)
    _pub(store, "s.a", Nats_Rollup="sub")
    st = store.stream_info("S", subjects_filter=">").state
    assert st.subjects == {"s.a": 1, "s.b": 2}
    _pub(store, "s.c", Nats_Rollup="all")
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (1, 6, 6)


def test_rollup_not_permitted_and_invalid(store: Store) -> None:
    _stream(store)
    e = _err(_pub, store, "s.a", Nats_Rollup="sub")
    assert (e.err_code, e.description) == (10111, "rollup not permitted")
    _stream(store, name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    e = _err(_pub, store, "r.a", Nats_Rollup="x")
    assert e.description == 'rollup value invalid: "x"'
    assert store.stream_state("R").last_seq == 0


@pytest.mark.parametrize(
    ("headers", "code", "err_code"),
    [
        ((("Bad Name", "v"),), 400, 10003),
        ((("X", "a\r\nb"),), 400, 10003),
        ((("", "v"),), 400, 10003),
        ((("Nats-TTL", "1s"),), 400, 10166),
        ((("Nats-Incr", "1"),), 400, 10168),
        ((("Nats-Schedule", "@every 1s"),), 400, 10188),
        ((("Nats-Batch-Id", "b"), ("Nats-Batch-Sequence", "1")), 400, 10174),
        ((("Nats-Expected-Last-Subject-Sequence-Subject", "s.b"),), 400, 10193),
    ],
)
def test_bad_headers_refused_and_change_nothing(
    store: Store, headers: tuple[tuple[str, str], ...], code: int, err_code: int
) -> None:
    """Malformed headers are a bad request (10003); the headers of features a stream must
    enable are refused as disabled (spec §1.8 for Nats-TTL, the others measured against
    nats-server 2.15.1); the subject of an expected last subject sequence without the
    sequence is 10193 (spec §1.8)."""
    _stream(store)
    e = _err(store.publish, "s.a", b"", headers)
    assert (e.code, e.err_code) == (code, err_code)
    assert store.stream_state("S").last_seq == 0


def test_expected_headers_read_as_nats_server_reads_them(store: Store) -> None:
    """Measured against nats-server 2.15.1: an empty expected-* or rollup header is no
    header; a sequence that does not parse expects seq 0."""
    _stream(store, allow_rollup_hdrs=True)
    assert _pub(store, "s.a", Nats_Expected_Last_Sequence="abc").seq == 1  # 0 expected
    e = _err(_pub, store, "s.a", Nats_Expected_Last_Sequence="-1")
    assert (e.err_code, e.description) == (10071, "wrong last sequence: 1")
    e = _err(_pub, store, "s.a", Nats_Expected_Last_Subject_Sequence="x")
    assert (e.err_code, e.description) == (10071, "wrong last sequence: 1")
    assert _pub(store, "s.a", b"x", Nats_Expected_Last_Sequence="").seq == 2
    assert _pub(store, "s.a", b"x", Nats_Expected_Last_Msg_Id="").seq == 3
    assert _pub(store, "s.a", Nats_Expected_Stream="", Nats_Rollup="").seq == 4
    assert store.stream_state("S").messages == 4


def test_bad_publish_subjects(store: Store) -> None:
    _stream(store)
    # "s.>" captures the literal "s.*" (its "*" is a token like any other), so the named
    # stream takes it and refuses its wildcard: 10003, not 10060.
    assert _err(store.publish, "s.*", b"", stream="S").err_code == 10003
    assert _err(store.publish, "s.*", b"").err_code == 10003
    assert store.publish("nope", b"") is None
    assert _err(store.publish, "s.a", b"", stream="NOPE").err_code == 10059


def test_publish_to_a_named_stream_needs_its_subjects(store: Store) -> None:
    _stream(store)
    store.create_stream({"name": "T", "subjects": ["t.>"]})
    assert store.publish("s.a", b"", stream="S") == PubAck("S", 1)
    assert _err(store.publish, "t.a", b"", stream="S").err_code == 10060  # T captures it
    assert _err(store.publish, "u.a", b"", stream="S").err_code == 10060  # nobody does
    assert store.publish("t.a", b"", stream="T") == PubAck("T", 1)
    assert store.stream_state("S").messages == 1
    # "s.>" needs a token after "s.": neither "s" nor another prefix sharing its start.
    assert _err(store.publish, "s", b"", stream="S").err_code == 10060
    assert _err(store.publish, "sx.a", b"", stream="S").err_code == 10060


def test_named_stream_follows_a_subjects_update(store: Store) -> None:
    """The named-stream check is built per config: an update that adds subjects (one with
    wildcards, so not the single-prefix shortcut) applies to the next publish."""
    store.create_stream({"name": "W", "subjects": ["w.>"]})
    assert _err(store.publish, "v.a.b", b"", stream="W").err_code == 10060
    store.update_stream({"name": "W", "subjects": ["w.>", "v.*.b"]})
    assert store.publish("v.a.b", b"", stream="W") == PubAck("W", 1)
    assert _err(store.publish, "v.a.c", b"", stream="W").err_code == 10060
    assert store.publish("w.x", b"", stream="W") == PubAck("W", 2)
    store.update_stream({"name": "W", "subjects": ["v.*.b"]})
    assert _err(store.publish, "w.x", b"", stream="W").err_code == 10060


def test_sealed_stream_refuses_everything(store: Store) -> None:
    _stream(store)
    _pub(store, "s.a")
    store.update_stream({"name": "S", "subjects": ["s.>"], "sealed": True})
    assert _err(_pub, store, "s.a").err_code == 10109
    assert _err(store.purge_stream, "S").err_code == 10109
    assert _err(store.delete_msg, "S", 1).err_code == 10109


def test_sealing_fixes_the_config_as_nats_server_does(store: Store) -> None:
    """Measured against nats-server 2.15.1: sealing sets deny_delete, deny_purge,
    discard new, no max_age, no rollups; an update that leaves the deny flags out is then
    refused for cancelling them. A first_seq update is kept in the config only."""
    base = {"name": "S", "subjects": ["s.>"], "max_age": 60 * SEC, "allow_rollup_hdrs": True}
    _stream(store, **{k: v for k, v in base.items() if k not in ("name", "subjects")})
    _pub(store, "s.a")
    cfg = store.update_stream({**base, "first_seq": 9}).config
    assert cfg.first_seq == 9
    assert store.stream_state("S").first_seq == 1
    cfg = store.update_stream({**base, "sealed": True}).config
    assert (cfg.deny_delete, cfg.deny_purge, cfg.discard) == (True, True, "new")
    assert (cfg.max_age, cfg.allow_rollup_hdrs) == (0, False)
    e = _err(store.update_stream, {**base, "sealed": True})
    assert e.description == "stream configuration update can not cancel deny message deletes"


# -- purge, delete, get ----------------------------------------------------------------------


def test_purge_all_keeps_sequence_going(store: Store) -> None:
    _stream(store)
    for _ in range(3):
        _pub(store, "s.a")
    assert store.purge_stream("S") == 3
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (0, 4, 3)
    assert _pub(store, "s.a").seq == 4


def test_purge_filter_seq_keep(store: Store) -> None:
    _stream(store)
    for s in ("s.a", "s.b", "s.a", "s.b", "s.a"):
        _pub(store, s)
    assert store.purge_stream("S", filter="s.a", keep=1) == 2
    assert store.purge_stream("S", seq=3) == 1  # seq 2 only (1 and 3 are gone)
    assert [m.seq for m in store.iter_msgs("S")] == [4, 5]
    assert _err(store.purge_stream, "S", seq=1, keep=1).err_code == 10003


def test_deny_purge_and_deny_delete(store: Store) -> None:
    _stream(store, deny_purge=True, deny_delete=True)
    _pub(store, "s.a")
    e = _err(store.purge_stream, "S")
    assert (e.err_code, e.description) == (10110, "stream purge not permitted")
    e = _err(store.delete_msg, "S", 1)
    assert (e.err_code, e.description) == (10057, "message delete not permitted")


def test_delete_msg_and_num_deleted(store: Store) -> None:
    _stream(store)
    for _ in range(4):
        _pub(store, "s.a")
    store.delete_msg("S", 2)
    store.delete_msg("S", 3)
    st = store.stream_info("S", deleted_details=True).state
    assert (st.messages, st.first_seq, st.num_deleted, st.deleted) == (2, 1, 2, [2, 3])
    # As a single nats-server 2.15.1 answers (measured): a gap inside the stream is 10043,
    # past either end its file store's error as 500/10057.
    e = _err(store.delete_msg, "S", 2)
    assert (e.code, e.err_code, e.description) == (400, 10043, "sequence 2 not found")
    e = _err(store.delete_msg, "S", 99)
    assert (e.code, e.err_code, e.description) == (500, 10057, "stream store EOF")
    store.delete_msg("S", 1)
    e = _err(store.delete_msg, "S", 1)
    assert (e.code, e.err_code, e.description) == (500, 10057, "no message found")
    assert store.stream_state("S").first_seq == 4


def test_get_last_next_by_subject(store: Store) -> None:
    _stream(store)
    for s in ("s.a", "s.b", "s.a"):
        _pub(store, s, s.encode())
    assert store.get_msg("S", 2).subject == "s.b"
    assert store.last_by_subject("S", "s.a").seq == 3
    assert store.last_by_subject("S", "s.*").seq == 3
    assert store.next_by_subject("S", "s.a", 2).seq == 3
    assert _err(store.get_msg, "S", 9).err_code == 10037
    assert _err(store.last_by_subject, "S", "s.zz").err_code == 10037
    assert _err(store.get_msg, "NOPE", 1).err_code == 10059


def test_headers_and_time_are_stored(store: Store, clock: FakeClock) -> None:
    _stream(store)
    _pub(store, "s.a", b"p", X_A="1")
    m = store.get_msg("S", 1)
    assert m.headers == (("X-A", "1"),)
    assert m.header("X-A") == "1"
    assert m.time_ns == T0
    assert parse_time(format_time(T0 + 123)) == T0 + 123


def test_delete_stream_removes_everything(store: Store) -> None:
    _stream(store)
    _pub(store, "s.a", Nats_Msg_Id="x")
    store.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit"})
    store.delete_stream("S")
    assert store.stream_names() == []
    assert _err(store.stream_info, "S").err_code == 10059
    _stream(store)
    assert _pub(store, "s.a", Nats_Msg_Id="x").seq == 1
    for name, stat in store.env.stat().items():
        if name in ("msgs", "subjects", "subjcount", "dedupe", "dedupeseq"):
            assert stat["entries"] == 1, name


def test_state_survives_restart(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "d", clock=clock) as s:
        _stream(s, max_msgs=2)
        for _ in range(3):
            _pub(s, "s.a")
        before = s.stream_info("S").state
    with Store.open(tmp_path / "d", clock=clock) as s:
        assert s.stream_info("S").state == before
        assert _pub(s, "s.a").seq == 4


def test_interest_stream_without_consumers_stores_nothing(store: Store) -> None:
    _stream(store, retention="interest")
    assert _pub(store, "s.a").seq == 1
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (0, 2, 1)


def test_batch_submission_from_events_is_not_required(store: Store, events: Events) -> None:
    _stream(store)
    res = store.submit([Publish("s.a"), Publish("s.b")]).result(timeout=10)
    assert [r.seq for r in res if isinstance(r, PubAck)] == [1, 2]
    assert events.take() == []


def test_dedupe_entries_are_evicted_without_ticks(store: Store, clock: FakeClock) -> None:
    _stream(store, duplicate_window=SEC)
    for i in range(10):
        _pub(store, "s.a", Nats_Msg_Id=f"id{i}")
    clock.advance(2 * SEC)
    for i in range(10):
        _pub(store, "s.a", Nats_Msg_Id=f"new{i}")
    stats = store.env.stat()
    assert stats["dedupe"]["entries"] <= 11
    assert stats["dedupeseq"]["entries"] <= 11


def test_wildcard_purge_and_subject_prefix_scan(store: Store) -> None:
    _stream(store)
    for s in ("s.q.c1.1", "s.q.c1.2", "s.q.c2.1", "s.q.c10.1", "s.r.c1.1"):
        _pub(store, s)
    assert store.purge_stream("S", filter="s.q.c1.*") == 2
    st = store.stream_info("S", subjects_filter="s.*.c1*.>").state
    assert st.subjects is None  # nothing matches: left out, as nats-server does
    st = store.stream_info("S", subjects_filter="s.*.*.1").state
    assert st.subjects == {"s.q.c2.1": 1, "s.q.c10.1": 1, "s.r.c1.1": 1}
    assert store.last_by_subject("S", "s.q.>").subject == "s.q.c10.1"


def test_literal_prefix() -> None:
    assert literal_prefix("a.b.*") == "a.b."
    assert literal_prefix("a.>") == "a."
    assert literal_prefix("*.a") == ""
    assert literal_prefix("a.b") == "a.b"


def test_an_oversized_message_is_refused_before_its_headers_are_checked(store: Store) -> None:
    """nats-server 2.15.1's order (measured): sealed, then max_msg_size, then the
    expected-* and dedupe headers."""
    _stream(store, max_msg_size=100)
    _pub(store, "s.a", b"x", **{"Nats-Msg-Id": "m1"})
    big = b"y" * 101
    for hdrs in (
        (("Nats-Expected-Stream", "other"),),
        (("Nats-Expected-Last-Sequence", "9"),),
        (("Nats-Expected-Last-Subject-Sequence", "9"),),
        (("Nats-Msg-Id", "m1"),),  # a duplicate, were it not too big
        (("Nats-Rollup", "bad"),),
    ):
        assert _err(store.publish, "s.a", big, hdrs).err_code == 10054
    store.update_stream({"name": "S", "subjects": ["s.>"], "max_msg_size": 100, "sealed": True})
    assert _err(store.publish, "s.a", big).err_code == 10109


def test_deleted_details_and_subjects_as_the_server_lists_them(store: Store) -> None:
    """Found against nats-server: a message removed after the last stored one is listed as
    deleted too; a subjects filter matching nothing leaves the map out (None)."""
    _stream(store)
    for _ in range(4):
        _pub(store, "s.a")
    store.delete_msg("S", 2)
    store.delete_msg("S", 4)  # the last: last_seq stays 4
    st = store.stream_info("S", deleted_details=True, subjects_filter="s.zzz").state
    assert (st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (1, 4, 2, [2, 4])
    assert st.subjects is None
    assert store.stream_info("S", subjects_filter="s.*").state.subjects == {"s.a": 2}


@pytest.mark.timeout(120)
def test_subject_details_come_in_pages_as_the_server_sends_them(tmp_path: Path) -> None:
    """nats-server's paging of ``state.subjects`` (JSMaxSubjectDetails): at most 100,000
    subjects from ``offset`` in byte order, with the number matching as the total and the
    requested offset; an offset past the end leaves the map out but keeps the total.
    ``>`` stops reading at the page's end (the stream's state counts its subjects)."""
    n = SUBJECTS_PAGE + 5
    subjects = sorted(f"s.{i}" for i in range(n))  # byte order: s.0, s.1, s.10, ...
    with Store.open(tmp_path / "d", sync="batch") as s:
        s.create_stream({"name": "S", "subjects": ["s.>", "t.>"]})
        for start in range(0, n, 5_000):
            s.submit([Publish(x, b"") for x in subjects[start : start + 5_000]]).result(60)
        s.publish("s.0", b"")  # counts of 2 and 1
        s.publish("t.x", b"")  # matched by ">" only
        for filter_, total in ((">", n + 1), ("s.*", n)):
            info, paged = s.stream_info_paged("S", subjects_filter=filter_)
            assert paged == Paged(total, 0, SUBJECTS_PAGE)
            got = info.state.subjects
            assert got is not None
            assert list(got) == subjects[:SUBJECTS_PAGE]
            assert got["s.0"] == 2
            assert set(got.values()) == {1, 2}
            info, paged = s.stream_info_paged("S", subjects_filter=filter_, offset=SUBJECTS_PAGE)
            assert paged == Paged(total, SUBJECTS_PAGE, SUBJECTS_PAGE)
            tail = dict.fromkeys(subjects[SUBJECTS_PAGE:], 1)
            if filter_ == ">":
                tail["t.x"] = 1
            assert info.state.subjects == tail
            info, paged = s.stream_info_paged("S", subjects_filter=filter_, offset=10 * n)
            assert (info.state.subjects, paged) == (None, Paged(total, 10 * n, SUBJECTS_PAGE))
        info, paged = s.stream_info_paged("S", subjects_filter="u.*")
        assert (info.state.subjects, paged) == (None, Paged())
        assert s.stream_info_paged("S")[1] == Paged()

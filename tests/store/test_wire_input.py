"""Bad input at the edges of the wire: numbers out of their Go type's range, fields this
store does not do, long message ids, NAK delays nobody can honour. Each gets a JetStream
error (or the server's lenient reading) and changes nothing; none may crash a batch or
leave a stream that refuses every later publish.

What nats-server 2.15.1 answers for the same bodies is compared directly in
tests/store/test_against_nats.py (``BAD_STREAM_CONFIGS``, ``BAD_CONSUMER_CONFIGS``,
``test_wire_numbers_and_updates_as_nats_server_does``); here are the cases the server
accepts and this store refuses on purpose, and the effects behind the answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from store import (
    Ack,
    AckKind,
    DeleteMsg,
    Delivery,
    JetStreamError,
    PubAck,
    Publish,
    PurgeStream,
    Store,
    StreamConfig,
    pubsyntax,
    subjects,
)
from store.acks import ack_from_payload, parse_ack_reply
from store.errors import js_error
from store.models import ConsumerConfig
from tests.store.conftest import SEC, Events, FakeClock

U64_MAX = (1 << 64) - 1


def _err(fn: Any, *args: Any, **kw: Any) -> JetStreamError:
    with pytest.raises(JetStreamError) as ei:
        fn(*args, **kw)
    return ei.value


def _code(e: JetStreamError) -> tuple[int, int]:
    return e.code, e.err_code


def _stream(store: Store, **cfg: Any) -> None:
    cfg.setdefault("name", "S")
    cfg.setdefault("subjects", ["s.>"])
    store.create_stream(cfg)


def _fill(store: Store, n: int) -> None:
    for i in range(n):
        assert store.publish(f"s.{i % 3}", b"x") is not None


# -- stream and consumer features this store does not do ------------------------------------


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"republish": {"src": "s.>", "dest": "r.>"}}, "republish is not supported"),
        ({"subject_transform": {"src": "s.>", "dest": "t.>"}}, "subject transforms are"),
        ({"allow_msg_counter": True}, "message counters are not supported"),
        ({"allow_atomic": True}, "atomic batch publish is not supported"),
        ({"allow_batched": True}, "fast batch publish is not supported"),
        ({"allow_msg_schedules": True}, "message schedules are not supported"),
        ({"subject_delete_marker_ttl": SEC}, "per-message TTL is not supported"),
        ({"pedantic": True}, "pedantic mode is not supported"),
    ],
)
def test_stream_features_not_done_are_refused(
    store: Store, extra: dict[str, Any], words: str
) -> None:
    """nats-server 2.15.1 accepts each of these; a store that dropped them would answer
    a config that does something else (the field vanished from the echo)."""
    e = _err(_stream, store, **extra)
    assert _code(e) == (500, 10052)
    assert words in e.description
    assert store.stream_names() == []


def test_stream_fields_set_off_are_accepted_and_not_echoed(store: Store) -> None:
    _stream(
        store,
        allow_atomic=False,
        allow_msg_counter=False,
        allow_batched=False,
        allow_msg_schedules=False,
        subject_delete_marker_ttl=0,
        pedantic=False,
        persist_mode="default",
        placement={"cluster": "C1"},
    )
    wire = store.stream_info("S").config.to_wire()
    for off in ("allow_atomic", "allow_msg_counter", "allow_batched", "pedantic"):
        assert off not in wire
    assert "persist_mode" not in wire
    assert wire["placement"] == {"cluster": "C1"}  # echoed, as a single server does


def test_persist_mode_async_is_echoed_and_still_durable(tmp_path: Path) -> None:
    """``async`` lets nats-server answer before its disk write; this store keeps its own
    sync policy (a PubAck stays a stored message), which that mode permits."""
    with Store.open(tmp_path / "d") as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "persist_mode": "async"})
        assert s.stream_info("S").config.persist_mode == "async"
        assert s.publish("s.a", b"x") == PubAck("S", 1)
    with Store.open(tmp_path / "d") as s:
        assert s.get_msg("S", 1).payload == b"x"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            {"priority_policy": "overflow", "priority_groups": ["g"]},
            "priority groups are not supported",
        ),
        ({"sourcing": True}, "sourcing consumers are not supported"),
        (
            {"durable_name": None, "deliver_subject": "d.x", "direct": True},
            "direct consumers are not supported",
        ),
    ],
)
def test_consumer_features_not_done_are_refused(
    store: Store, extra: dict[str, Any], words: str
) -> None:
    _stream(store)
    cfg = {"durable_name": "c", **extra}
    e = _err(store.create_consumer, "S", {k: v for k, v in cfg.items() if v is not None})
    assert _code(e) == (500, 10012)
    assert words in e.description
    assert store.consumer_names("S") == []


def test_pause_until_the_zero_time_is_no_pause(store: Store) -> None:
    _stream(store)
    info = store.create_consumer("S", {"durable_name": "c", "pause_until": "0001-01-01T00:00:00Z"})
    assert info.config.to_wire()["pause_until"] == "0001-01-01T00:00:00Z"


def test_path_separators_in_names_have_their_own_errors(store: Store) -> None:
    assert _code(_err(_stream, store, name="a/b", subjects=["x"])) == (400, 10128)
    assert _code(_err(_stream, store, name="a\\b", subjects=["x"])) == (400, 10128)
    _stream(store)
    for key in ("durable_name", "name"):
        e = _err(store.create_consumer, "S", {key: "c/d"})
        assert e == js_error("consumer_name_path_separators")
    assert store.stream_names() == ["S"]
    assert store.consumer_names("S") == []


# -- the shape of a body, as Go's JSON decoding reads it --------------------------------------


def test_a_body_keeps_its_number_literals_for_the_error() -> None:
    e = _err(StreamConfig.from_wire, b'{"name": "S", "max_msgs": 1e3}')
    assert e.description == (
        "invalid JSON: json: cannot unmarshal number 1e3 into Go struct field"
        " StreamConfigRequest.max_msgs of type int64"
    )
    e = _err(ConsumerConfig.from_wire, '{"ack_wait": 2.50}')
    assert "number 2.50 into Go struct field CreateConsumerRequest.config.ack_wait" in str(e)


def test_an_enum_of_another_kind_is_named_by_its_json() -> None:
    e = _err(StreamConfig.from_wire, {"name": "S", "retention": {"a": [1, None]}})
    assert e.description == 'invalid JSON: can not unmarshal "{\\"a\\":[1,null]}"'


def test_null_fields_are_left_at_their_defaults() -> None:
    cfg = StreamConfig.from_wire(
        {"name": "S", "max_msgs": None, "subjects": None, "consumer_limits": None}
    )
    assert (cfg.max_msgs, cfg.subjects) == (-1, ["S"])
    ccfg = ConsumerConfig.from_wire({"backoff": [None, SEC], "metadata": {"k": None}})
    assert ccfg.backoff == [0, SEC]
    assert ccfg.metadata == {"k": ""}


# -- numbers out of range: refused before anything runs --------------------------------------


def test_purge_with_numbers_outside_uint64_changes_nothing(store: Store) -> None:
    _stream(store)
    _fill(store, 5)
    for kw in ({"keep": -1}, {"seq": -1}, {"seq": U64_MAX + 1}, {"filter": "s.0", "keep": -2}):
        e = _err(store.purge_stream, "S", **kw)
        assert _code(e) == (400, 10025)
        assert "JSApiStreamPurgeRequest" in e.description
    # Submitted as an operation (the broker's way), the writer refuses it the same.
    res = store.submit([PurgeStream("S", keep=-1)]).result(timeout=10)
    assert isinstance(res[0], JetStreamError)
    assert res[0].err_code == 10025
    assert store.stream_state("S").messages == 5
    assert store.purge_stream("S", seq=U64_MAX) == 5  # the largest seq is a seq


def test_message_get_and_delete_with_bad_seqs(store: Store) -> None:
    _stream(store)
    _fill(store, 2)
    for seq in (-1, U64_MAX + 1):
        for e in (
            _err(store.get_msg, "S", seq),
            _err(store.delete_msg, "S", seq),
            _err(store.next_by_subject, "S", "s.0", seq),
        ):
            assert _code(e) == (400, 10025)
    res = store.submit([DeleteMsg("S", -3)]).result(timeout=10)
    assert isinstance(res[0], JetStreamError)
    assert res[0].err_code == 10025
    assert _err(store.get_msg, "S", 0) == js_error("bad_request")  # seq 0 names nothing
    assert store.stream_state("S").messages == 2


def test_a_stream_at_the_end_of_the_sequence_space_refuses_more(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The last seq a message takes is 2^64-2: removing it leaves the stream's first seq
    one past it, which must still pack (it failed every later Tick with max_age)."""
    last = U64_MAX - 1
    with Store.open(tmp_path / "d", clock=clock) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "first_seq": last})
        assert s.publish("s.a", b"last") == PubAck("S", last)
        e = _err(s.publish, "s.a", b"more")
        assert (_code(e), e.description) == ((503, 10077), "stream sequence space exhausted")
    with Store.open(tmp_path / "d", clock=clock) as s:
        st = s.stream_state("S")
        assert (st.messages, st.first_seq, st.last_seq) == (1, last, last)
        assert s.get_msg("S", last).payload == b"last"
        s.delete_msg("S", last)
        st = s.stream_state("S")
        assert (st.messages, st.first_seq, st.last_seq) == (0, U64_MAX, last)
        assert s.purge_stream("S") == 0
        assert list(s.iter_msgs("S", start=U64_MAX + 5)) == []
        # Purged up to the end, a stream with max_age, a Tick: it expires, Ticks go on.
        s.create_stream({"name": "E", "subjects": ["e.>"], "max_age": SEC})
        s.purge_stream("E", seq=last)
        assert s.publish("e.a", b"x") == PubAck("E", last)
        clock.advance(2 * SEC)
        s.tick(clock.now).result(timeout=10)
        assert s.stream_state("E").messages == 0
        assert _code(_err(s.publish, "e.a", b"y")) == (503, 10077)


def test_consumer_durations_outside_int64_are_refused(store: Store) -> None:
    _stream(store)
    for cfg in ({"ack_wait": 1 << 63}, {"backoff": [SEC, 1 << 64]}, {"max_expires": -(1 << 64)}):
        e = _err(store.create_consumer, "S", {"durable_name": "c", **cfg})
        assert _code(e) == (400, 10025)
    assert store.consumer_names("S") == []


def test_the_longest_ack_wait_leaves_the_stream_working(store: Store, events: Events) -> None:
    """An ack wait of int64's maximum (the largest the server takes) with a pull waiting:
    its deadline is written with every delivery, so it must pack; publishes go on."""
    _stream(store)
    store.create_consumer(
        "S", {"durable_name": "c", "ack_policy": "explicit", "ack_wait": (1 << 63) - 1}
    )
    store.pull("S", "c", "inbox", batch=10, expires_ns=60 * SEC)
    _fill(store, 3)
    assert [e.msg.seq for e in events.take() if isinstance(e, Delivery)] == [1, 2, 3]
    assert store.stream_state("S").messages == 3


def test_negative_request_limits_read_as_the_server_reads_them(
    store: Store, events: Events
) -> None:
    _stream(store)
    cfg = {"durable_name": "c", "max_waiting": -5, "max_batch": -5, "max_bytes": -5}
    info = store.create_consumer("S", {**cfg, "max_expires": -5, "max_ack_pending": -5})
    wire = info.config.to_wire()
    assert (wire["max_waiting"], wire["max_ack_pending"]) == (512, -1)
    assert not {"max_batch", "max_bytes", "max_expires"} & wire.keys()
    _fill(store, 2)
    store.pull("S", "c", "inbox", batch=2)  # not refused for max_waiting (was: 409)
    assert [e.msg.seq for e in events.take() if isinstance(e, Delivery)] == [1, 2]


# -- message ids longer than an LMDB key -----------------------------------------------------


@pytest.mark.parametrize("length", [255, 256, 257, 503, 4000])
def test_long_message_ids_deduplicate(tmp_path: Path, clock: FakeClock, length: int) -> None:
    msg_id = "é" * (length // 2) + "x" * (length % 2)  # ``length`` bytes of UTF-8
    other = msg_id[:-1] + ("y" if msg_id.endswith("x") else "ü")  # as long, not the same
    hdr = (("Nats-Msg-Id", msg_id),)
    with Store.open(tmp_path / "d", clock=clock) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "duplicate_window": 10 * SEC})
        assert s.publish("s.a", b"1", hdr) == PubAck("S", 1)
        assert s.publish("s.a", b"2", hdr) == PubAck("S", 1, duplicate=True)
        assert s.publish("s.a", b"3", (("Nats-Msg-Id", other),)) == PubAck("S", 2)
    with Store.open(tmp_path / "d", clock=clock) as s:
        assert s.publish("s.a", b"4", hdr) == PubAck("S", 1, duplicate=True)
        e = _err(s.publish, "s.a", b"5", (("Nats-Expected-Last-Msg-Id", "nope"),))
        assert e.description == f"wrong last msg ID: {other}"
        clock.advance(11 * SEC)
        assert s.publish("s.a", b"6", hdr) == PubAck("S", 3)  # the window is over


# -- NAK delays the server cannot read are plain NAKs ----------------------------------------


@pytest.mark.parametrize(
    ("payload", "delay"),
    [
        (b'-NAK {"delay": 2000000000}', 2 * SEC),
        (b'-NAK {"delay": 1e30}', 0),
        (b'-NAK {"delay": 9223372036854775808}', 0),
        (b'-NAK {"delay": 1.5}', 0),
        (b'-NAK {"delay": "5s"}', 0),
        (b'-NAK {"delay": null}', 0),
        (b"-NAK {not json", 0),
        (b"-NAK 9999999999999h", 0),
        (b"-NAK soon", 0),
    ],
)
def test_nak_delays_out_of_range_are_plain_naks(payload: bytes, delay: int) -> None:
    reply = parse_ack_reply("$JS.ACK.S.c.1.7.7.1795272158253893959.0")
    op = ack_from_payload(reply, payload)
    assert op.delay_ns == delay


# -- consumer updates meet the stream's rules ------------------------------------------------


def test_workqueue_consumer_updates_keep_filters_unique(store: Store) -> None:
    store.create_stream({"name": "W", "subjects": ["w.>"], "retention": "workqueue"})
    base = {"ack_policy": "explicit"}
    store.create_consumer("W", {"durable_name": "a", "filter_subject": "w.a", **base})
    store.create_consumer("W", {"durable_name": "b", "filter_subject": "w.b", **base})
    for upd in (
        {"filter_subject": "w.a"},
        {"filter_subject": "w.>"},
        {"filter_subjects": ["w.c", "w.a"]},
    ):
        e = _err(store.create_consumer, "W", {"durable_name": "b", **base, **upd}, "update")
        assert e == js_error("wq_consumer_not_unique")
        assert store.consumer_info("W", "b").config.filter_subject == "w.b"
    # Its own filter again, or a new one no other takes: fine.
    store.create_consumer("W", {"durable_name": "b", "filter_subject": "w.c", **base}, "update")
    assert store.consumer_info("W", "b").config.filter_subject == "w.c"


def test_push_consumer_updates_may_not_deliver_into_the_stream(store: Store) -> None:
    _stream(store)
    store.create_consumer("S", {"durable_name": "p", "deliver_subject": "d.x"})
    e = _err(store.create_consumer, "S", {"durable_name": "p", "deliver_subject": "s.x"})
    assert e == js_error("deliver_subject_cycle")
    assert store.consumer_info("S", "p").config.deliver_subject == "d.x"


@pytest.mark.parametrize("remove_slice", [3, 1000])
def test_interest_decides_again_when_a_consumer_changes_filters(
    tmp_path: Path, remove_slice: int
) -> None:
    """As when a consumer is deleted: the messages only its old filter wanted go, in
    slices on a big stream; the update still answers with the consumer's info."""
    with Store.open(tmp_path / "d", remove_slice=remove_slice) as s:
        s.create_stream({"name": "I", "subjects": ["i.>"], "retention": "interest"})
        base = {"durable_name": "c", "ack_policy": "explicit"}
        s.create_consumer("I", {**base, "filter_subject": "i.a"})
        s.create_consumer(
            "I", {"durable_name": "d", "ack_policy": "explicit", "filter_subject": "i.z"}
        )
        for i in range(10):
            s.publish("i.z" if i == 4 else "i.a", b"x")
        info = s.create_consumer("I", {**base, "filter_subject": "i.b"}, "update")
        assert info.config.filter_subject == "i.b"
        assert info.num_pending == 0
        st = s.stream_state("I")
        assert (st.messages, st.first_seq, st.last_seq) == (1, 5, 10)  # d's i.z stays
    with Store.open(tmp_path / "d") as s:
        assert s.stream_state("I").messages == 1


# -- found by fuzzing the store's API (each failed a whole job, the writer or a reopen) -------


def test_a_lone_surrogate_escape_reads_as_go_reads_it(tmp_path: Path) -> None:
    """JSON ``"\\ud800"`` is U+FFFD to Go; kept as a lone surrogate it was written to the
    stream record and the store could not open again."""
    body = b'{"name":"S","subjects":["s.>"],"description":"a\\ud800","metadata":{"\\udc00":"x"}}'
    with Store.open(tmp_path / "d") as s:
        s.create_stream(StreamConfig.from_wire(body))
        s.create_consumer(
            "S", ConsumerConfig.from_wire('{"durable_name":"c","description":"\\ud800"}')
        )
        cfg = s.stream_info("S").config
        assert (cfg.description, cfg.metadata) == ("a\ufffd", {"\ufffd": "x"})
        # A config built in Python (no wire) keeps what it was given, and still reopens.
        s.create_stream(StreamConfig(name="T", subjects=["t.>"], description="\udfff"))
    with Store.open(tmp_path / "d") as s:
        assert s.stream_info("T").config.description == "\udfff"
        assert s.consumer_info("S", "c").config.description == "\ufffd"


def test_lone_surrogates_in_a_publish_are_a_bad_request(store: Store) -> None:
    _stream(store)
    res = store.submit(
        [Publish("s.\ud800", b"x"), Publish("s.a", b"x", (("X", "\udc00"),)), Publish("s.b")]
    ).result(timeout=10)
    assert [r.err_code if isinstance(r, JetStreamError) else r for r in res] == [
        10003,
        10003,
        PubAck("S", 1),
    ]


def test_non_ascii_digits_are_no_sequence(store: Store) -> None:
    """``str.isdigit`` takes superscripts and other scripts' digits; ``int`` refuses some
    (a ValueError failed the job); nats-server reads none of them as a number."""
    _stream(store)
    _fill(store, 1)
    for raw in ("\u00b2", "\u0661"):
        for name in ("Nats-Expected-Last-Sequence", "Nats-Expected-Last-Subject-Sequence"):
            res = store.submit([Publish("s.a", b"ok"), Publish("s.0", b"x", ((name, raw),))])
            out = res.result(timeout=10)
            assert isinstance(out[0], PubAck)
            assert isinstance(out[1], JetStreamError)  # expects seq 0 there: wrong last seq


def test_an_empty_stream_name_is_no_stream(store: Store) -> None:
    for e in (
        _err(store.get_msg, "", 1),
        _err(store.last_by_subject, "", "s.a"),
        _err(store.next_by_subject, "", "s.a"),
        _err(store.consumer_names, ""),
        _err(store.purge_stream, "", keep=1),
        _err(lambda: list(store.iter_msgs(""))),
    ):
        assert e == js_error("stream_not_found")


def test_a_retimed_ack_wait_stays_within_its_record(store: Store, events: Events) -> None:
    """An update of ack_wait moves every running wait by the difference: from a NAK delay
    at int64's maximum, by as much again, the deadline no longer fit its u64."""
    _stream(store)
    base = {"durable_name": "c", "ack_policy": "explicit"}
    store.create_consumer("S", {**base, "ack_wait": SEC})
    _fill(store, 2)
    store.pull("S", "c", "inbox", batch=2)
    events.take()
    store.submit([Ack("S", "c", 1, AckKind.NAK, delay_ns=(1 << 63) - 1)]).result(timeout=10)
    info = store.create_consumer("S", {**base, "ack_wait": (1 << 63) - 1})
    assert info.num_ack_pending == 2
    info = store.create_consumer("S", {**base, "ack_wait": SEC})  # and back: not below 0
    assert info.num_ack_pending == 2


def test_nxt_batches_that_are_not_integers_are_value_errors() -> None:
    reply = parse_ack_reply("$JS.ACK.S.c.1.7.7.1795272158253893959.0")
    for payload in (b'+NXT {"batch": null}', b'+NXT {"batch": 1e400}', b"+NXT [1]", b"+NXT x"):
        with pytest.raises(ValueError, match=r"batch|invalid literal"):
            ack_from_payload(reply, payload)
    assert ack_from_payload(reply, b'+NXT {"batch": 3}').next_batch == 3


def test_operations_may_come_as_any_iterable(store: Store) -> None:
    """A generator of operations used to commit and then kill the writer (it took their
    count after the commit); every submission after it waited forever."""
    _stream(store)
    assert store.submit(Publish(f"s.{i}") for i in range(3)).result(timeout=10) == [
        PubAck("S", 1),
        PubAck("S", 2),
        PubAck("S", 3),
    ]
    assert store.publish("s.x") == PubAck("S", 4)


def test_a_tick_that_deletes_two_consumers_goes_on_with_both_checks(tmp_path: Path) -> None:
    """Each inactive consumer of an interest stream that a Tick deletes starts the check
    of the stream's messages; with both checks in slices, the second went on in place of
    the first (the Tick's job carried twice), and messages nobody wants stayed."""
    clock = FakeClock()
    with Store.open(tmp_path / "d", clock=clock, remove_slice=1) as s:
        s.create_stream({"name": "I", "subjects": ["i.>"], "retention": "interest"})
        s.create_stream({"name": "J", "subjects": ["j.>"], "retention": "interest"})
        s.create_consumer("I", {"durable_name": "keep", "filter_subject": "i.y"})
        s.create_consumer("J", {"durable_name": "keep", "filter_subject": "j.y"})
        for name, prefix in (("I", "i"), ("J", "j")):
            s.create_consumer(name, {"filter_subject": f"{prefix}.x", "inactive_threshold": SEC})
            for _ in range(3):
                s.publish(f"{prefix}.x", b"x")
        assert s.tick(clock.advance(2 * SEC)).result(timeout=10) is not None
        s.submit([]).result(timeout=10)  # a batch after the continuations' last slices
        for _ in range(10):
            if s.stream_state("I").messages == s.stream_state("J").messages == 0:
                break
            s.submit([]).result(timeout=10)
        assert (s.stream_state("I").messages, s.stream_state("J").messages) == (0, 0)
    with Store.open(tmp_path / "d", clock=clock) as s:
        assert s.resumed == []  # no check left behind in meta


def test_a_seq_of_another_python_type_is_a_type_error(store: Store) -> None:
    _stream(store)
    for bad in (None, 1.5, "3", True):
        res = store.submit([Publish("s.a"), DeleteMsg("S", bad)])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            res.result(timeout=10)
        with pytest.raises(TypeError):
            store.get_msg("S", bad)  # type: ignore[arg-type]
    assert store.stream_state("S").messages == 0  # the job's publish went with it
    assert store.publish("s.a") == PubAck("S", 1)


def test_a_python_built_pause_until_that_is_no_time_is_refused(store: Store) -> None:
    _stream(store)
    e = _err(store.create_consumer, "S", ConsumerConfig(durable_name="c", pause_until="soon"))
    assert _code(e) == (400, 10025)
    assert e.description.startswith('invalid JSON: parsing time "soon"')


def test_header_blocks(store: Store) -> None:
    """A header block handed over encoded (the broker's own records) is stored exactly as
    the same headers given as pairs; one that is not an ASCII NATS/1.0 block is refused
    and stores nothing; one naming a ``Nats-`` header is checked as pairs are."""
    store.create_stream({"name": "HB", "subjects": ["hb.>"]})
    pairs = (("Mqtt-Topic", '"a/b"'), ("Mqtt-Qos", "1"))
    block = b'NATS/1.0\r\nMqtt-Topic: "a/b"\r\nMqtt-Qos: 1\r\n\r\n'
    one = store.submit([Publish("hb.1", b"x", pairs), Publish("hb.1", b"x", block)])
    a, b = one.result(timeout=10)
    assert isinstance(a, PubAck)
    assert isinstance(b, PubAck)
    got = list(store.iter_msgs("HB"))
    assert got[0].headers == got[1].headers == pairs
    for bad in (
        b"",
        b"HTTP/1.1\r\n\r\n",
        b"NATS/1.0\r\nK: v\r\n",
        "NATS/1.0\r\nK: é\r\n\r\n".encode(),
    ):
        res = store.submit([Publish("hb.2", b"y", bad)]).result(timeout=10)[0]
        assert isinstance(res, JetStreamError), bad
        assert res.err_code == 10003, bad
    dup = b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"
    first, second = store.submit([Publish("hb.3", b"z", dup), Publish("hb.3", b"z", dup)]).result(
        timeout=10
    )
    assert isinstance(first, PubAck)
    assert isinstance(second, PubAck)
    assert second.duplicate
    assert second.seq == first.seq
    assert store.stream_info("HB").state.messages == 3


def test_a_long_subject_is_refused_and_leaves_no_cached_key(store: Store) -> None:
    """A subject over 480 bytes (an MQTT topic may be 65,535) is refused as nats-server
    refuses it, captured or named, and the store's per-subject caches keep no such key:
    a cache of 65,536 of them would hold GiBs."""
    _stream(store)
    long_subject = "s." + "t" * 60_000
    ok_before = pubsyntax._short_subject_ok.cache_info()
    res = store.submit([Publish(long_subject, b"x"), Publish(long_subject, b"x", stream="S")])
    for r in res.result(timeout=10):
        assert isinstance(r, JetStreamError)
        assert r.err_code == 10003, r
        assert "invalid subject" in r.description
    assert long_subject not in store._engine.catalog._capture
    # Neither cache was asked about it (no hit, no miss: it never became a key).
    assert pubsyntax._short_subject_ok.cache_info()[:2] == ok_before[:2]
    # Matched against a filter with a wildcard token (the stream's "s.>" takes a prefix
    # test, no tokens), the long subject is split every time, never a cached key.
    assert subjects.subject_matches("s.*", "s.t")
    tokens_before = subjects._short_tokens.cache_info()
    for _ in range(2):
        assert subjects.subject_matches("s.*", long_subject)  # one token after "s."
    after = subjects._short_tokens.cache_info()
    assert (after.misses, after.currsize) == (tokens_before.misses, tokens_before.currsize)
    assert store.publish("s.ok", b"y") is not None
    assert store.stream_state("S").messages == 1

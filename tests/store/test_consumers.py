"""Consumer semantics of spec §1.6-1.9, one rule per test, with an injected clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from store import (
    Ack,
    AckKind,
    Advisory,
    ConsumerInfo,
    Delivery,
    JetStreamError,
    Publish,
    Pull,
    PullStatus,
    Store,
)
from store.acks import ack_from_payload, parse_ack_reply
from store.consumers import MAX_DELIVERIES_PER_BATCH
from store.models import format_time
from store.writer import Job
from tests.store.conftest import SEC, T0, Events, FakeClock


def _stream(store: Store, **cfg: Any) -> None:
    cfg.setdefault("name", "S")
    cfg.setdefault("subjects", ["s.>"])
    store.create_stream(cfg)


def _consumer(store: Store, name: str = "c", **cfg: Any) -> ConsumerInfo:
    cfg.setdefault("durable_name", name)
    cfg.setdefault("ack_policy", "explicit")
    return store.create_consumer("S", cfg)


def _fill(store: Store, *subjects: str) -> None:
    for s in subjects:
        assert store.publish(s, s.encode()) is not None


def _pull(store: Store, events: Events, batch: int = 1, c: str = "c", **kw: Any) -> list[Any]:
    store.pull("S", c, "inbox", batch=batch, **kw)
    return events.take()


def _seqs(evs: list[Any]) -> list[int]:
    return [e.msg.seq for e in evs if isinstance(e, Delivery)]


def _statuses(evs: list[Any]) -> list[tuple[int, str]]:
    return [(e.code, e.description) for e in evs if isinstance(e, PullStatus)]


def _err(fn: Any, *args: Any, **kw: Any) -> JetStreamError:
    with pytest.raises(JetStreamError) as ei:
        fn(*args, **kw)
    return ei.value


# -- basics ----------------------------------------------------------------------------------


def test_pull_delivers_in_order_and_info_counts(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store)
    evs = _pull(store, events, batch=2)
    assert _seqs(evs) == [1, 2]
    d = evs[0]
    assert isinstance(d, Delivery)
    assert d.ack_subject == f"$JS.ACK.S.c.1.1.1.{T0}.2"
    info = store.consumer_info("S", "c")
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (2, 2)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (0, 0)
    assert (info.num_ack_pending, info.num_pending, info.num_waiting) == (2, 1, 0)
    store.ack("S", "c", 1)
    info = store.consumer_info("S", "c")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (1, 1)
    store.ack("S", "c", 2)
    info = store.consumer_info("S", "c")
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (2, 2)
    assert info.num_ack_pending == 0


def test_filter_subject_is_applied(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.a.x", "s.b")
    _consumer(store, filter_subject="s.b")
    assert store.consumer_info("S", "c").num_pending == 2
    assert _seqs(_pull(store, events, batch=5)) == [2, 4]
    _consumer(store, "w", filter_subjects=["s.a", "s.*.x"])
    assert _seqs(_pull(store, events, batch=5, c="w")) == [1, 3]


def test_ack_removes_from_pending_and_is_not_redelivered(
    store: Store, events: Events, clock: FakeClock
) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=SEC)
    _pull(store, events)
    store.ack("S", "c", 1)
    store.ack("S", "c", 1)  # acking an acked seq is ignored
    store.pull("S", "c", "inbox")
    store.tick(clock.advance(5 * SEC)).result(timeout=10)
    assert _seqs(events.take()) == []
    assert store.consumer_info("S", "c").num_ack_pending == 0


# -- deliver policies ------------------------------------------------------------------------


def test_deliver_last(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.a")
    _consumer(store, deliver_policy="last")
    assert _seqs(_pull(store, events, batch=5)) == [3]
    _consumer(store, "f", deliver_policy="last", filter_subject="s.b")
    assert _seqs(_pull(store, events, batch=5, c="f")) == [2]


def test_deliver_new(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, deliver_policy="new")
    assert _pull(store, events) == []
    _fill(store, "s.b")
    assert _seqs(events.take()) == [2]


def test_deliver_by_start_sequence(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    info = _consumer(store, deliver_policy="by_start_sequence", opt_start_seq=2)
    assert info.delivered.stream_seq == 1
    assert _seqs(_pull(store, events, batch=5)) == [2, 3]


def test_deliver_by_start_time(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    _fill(store, "s.a")
    clock.advance(SEC)
    _fill(store, "s.b")
    _consumer(store, deliver_policy="by_start_time", opt_start_time=format_time(T0 + SEC))
    assert _seqs(_pull(store, events, batch=5)) == [2]


def test_deliver_last_per_subject(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.a", "s.c", "s.b")
    _consumer(store, deliver_policy="last_per_subject", filter_subject="s.*")
    assert _seqs(_pull(store, events, batch=10)) == [3, 4, 5]
    _fill(store, "s.a")
    assert _seqs(_pull(store, events)) == [6]


@pytest.mark.parametrize(
    ("cfg", "err_code"),
    [
        ({"deliver_policy": "all", "opt_start_seq": 3}, 10094),
        ({"deliver_policy": "by_start_sequence"}, 10094),
        ({"deliver_policy": "by_start_time"}, 10094),
        ({"deliver_policy": "last_per_subject"}, 10094),
        # As nats-server 2.15.1 answers (measured by tests/store/test_against_nats.py).
        ({"filter_subject": "s.a", "filter_subjects": ["s.b"]}, 10136),
        ({"filter_subjects": ["s.*", "s.a"]}, 10138),
        ({"filter_subjects": ["s.a", "s.a"]}, 10138),
        ({"filter_subject": "s..a"}, 10052),
        ({"filter_subjects": ["s.a", "s..b"]}, 10052),
        ({"max_deliver": 2, "backoff": [SEC, SEC, SEC]}, 10116),
        ({"deliver_subject": "d.*"}, 10079),
        ({"deliver_subject": "s.loop"}, 10081),
        ({"deliver_subject": "d", "max_waiting": 5}, 10080),
        ({"idle_heartbeat": SEC}, 10088),
        ({"flow_control": True}, 10089),
        ({"durable_name": "a.b"}, 10012),
        ({"ack_policy": "sometimes"}, 10025),  # nats-server's JSON decoding error
        ({"ack_wait": -1}, 10183),
        ({"num_replicas": -1}, 10133),
    ],
)
def test_invalid_consumer_configs(store: Store, cfg: dict[str, Any], err_code: int) -> None:
    _stream(store)
    cfg.setdefault("durable_name", "c")
    assert _err(store.create_consumer, "S", cfg).err_code == err_code
    assert store.consumer_names("S") == []


def test_a_filter_outside_the_streams_subjects_is_accepted_and_delivers_nothing(
    store: Store, events: Events
) -> None:
    """As nats-server 2.15.1 (measured): no "not a subset" refusal."""
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, filter_subject="other.>")
    assert store.consumer_info("S", "c").num_pending == 0
    assert _seqs(_pull(store, events, no_wait=True)) == []


def test_last_per_subject_counts_only_each_subjects_last(store: Store, events: Events) -> None:
    """num_pending before the first pass is over: one per matching subject (its last
    message then), not the superseded ones in between (as nats-server counts)."""
    _stream(store)
    _fill(store, "s.b", "s.a", "s.b", "s.a", "s.a", "s.c")
    _consumer(store, deliver_policy="last_per_subject", filter_subjects=["s.a", "s.b"])
    assert store.consumer_info("S", "c").num_pending == 2
    assert _seqs(_pull(store, events)) == [3]
    assert store.consumer_info("S", "c").num_pending == 1
    _fill(store, "s.a", "s.c")
    assert store.consumer_info("S", "c").num_pending == 2
    store.delete_msg("S", 4)  # superseded: was never counted
    assert store.consumer_info("S", "c").num_pending == 2
    assert _seqs(_pull(store, events, batch=5)) == [5, 7]
    assert store.consumer_info("S", "c").num_pending == 0


def test_create_update_actions(store: Store) -> None:
    _stream(store)
    base = {"durable_name": "c", "ack_policy": "explicit"}
    store.create_consumer("S", base, action="create")
    store.create_consumer("S", base, action="create")  # identical: fine
    e = _err(store.create_consumer, "S", {**base, "ack_wait": 5 * SEC}, action="create")
    assert e.err_code == 10148
    e = _err(store.create_consumer, "S", {**base, "durable_name": "x"}, action="update")
    assert e.err_code == 10149
    info = store.create_consumer("S", {**base, "ack_wait": 5 * SEC, "filter_subject": "s.a"})
    assert info.config.ack_wait == 5 * SEC
    e = _err(store.create_consumer, "S", {**base, "ack_policy": "all"})
    assert (e.err_code, e.description) == (10012, "ack policy can not be updated")
    assert _err(store.consumer_info, "S", "nope").err_code == 10014
    assert _err(store.consumer_info, "NOPE", "c").err_code == 10059


def test_max_consumers(store: Store) -> None:
    _stream(store, max_consumers=1)
    _consumer(store, "a")
    assert _err(_consumer, store, "b").err_code == 10026


def test_ephemeral_gets_a_name_and_inactive_threshold(store: Store) -> None:
    _stream(store)
    info = store.create_consumer("S", {"ack_policy": "explicit"})
    assert len(info.name) == 8
    assert info.config.inactive_threshold == 5 * SEC


# -- ack policies ----------------------------------------------------------------------------


def test_ack_policy_none_counts_delivered_as_acked(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store, ack_policy="none")
    _pull(store, events, batch=2)
    info = store.consumer_info("S", "c")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (2, 0)


def test_ack_policy_all_acks_everything_below(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store, ack_policy="all")
    _pull(store, events, batch=3)
    store.ack("S", "c", 2)
    info = store.consumer_info("S", "c")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (2, 1)


def _floor(store: Store) -> tuple[int, int]:
    info = store.consumer_info("S", "c")
    return info.ack_floor.consumer_seq, info.ack_floor.stream_seq


def _redeliver_all(store: Store, events: Events, clock: FakeClock, n: int) -> list[Delivery]:
    """Deliver messages 1..n, let their ack wait (10 s) run out, pull them again."""
    first = [e for e in _pull(store, events, batch=n) if isinstance(e, Delivery)]
    store.tick(clock.advance(10 * SEC)).result(timeout=10)
    again = [e for e in _pull(store, events, batch=n) if isinstance(e, Delivery)]
    assert [e.consumer_seq for e in first + again] == list(range(1, 2 * n + 1))
    return first + again


def test_ack_floor_keeps_the_first_delivery_consumer_seq(
    store: Store, events: Events, clock: FakeClock
) -> None:
    # As nats-server 2.15.1 (test_redelivery_nats.py): a redelivery does not change the
    # consumer seq the floor takes from a pending message.
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store, ack_wait=10 * SEC)
    _redeliver_all(store, events, clock, 3)  # consumer seqs 1-3, then 4-6
    store.ack("S", "c", 1)
    assert _floor(store) == (1, 1)  # message 2 pending: first delivered as consumer seq 2
    store.ack("S", "c", 2)
    assert _floor(store) == (2, 2)
    store.ack("S", "c", 3)
    assert _floor(store) == (6, 3)  # nothing pending: the last delivery


def test_ack_all_floor_is_the_acked_delivery(
    store: Store, events: Events, clock: FakeClock
) -> None:
    # As nats-server 2.15.1 (test_redelivery_nats.py): the ack's own delivery gives the
    # floor, and an ack from a delivery at or below the floor does nothing.
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store, ack_policy="all", ack_wait=10 * SEC)
    ds = _redeliver_all(store, events, clock, 3)
    by_cseq = {e.consumer_seq: e for e in ds}

    def ack(cseq: int) -> None:
        r = parse_ack_reply(by_cseq[cseq].ack_subject)
        store.submit([ack_from_payload(r, b"+ACK")]).result(timeout=10)

    ack(4)  # message 1's second delivery
    assert _floor(store) == (4, 1)
    ack(2)  # message 2's first delivery: below the floor
    info = store.consumer_info("S", "c")
    assert (_floor(store), info.num_ack_pending) == ((4, 1), 2)
    ack(5)  # message 2's second delivery
    assert _floor(store) == (5, 2)
    store.ack("S", "c", 3)  # consumer seq not known: nothing pending, the last delivery
    assert _floor(store) == (6, 3)


# -- redelivery ------------------------------------------------------------------------------


def test_ack_wait_redelivers_in_stream_order_before_new(
    store: Store, events: Events, clock: FakeClock
) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store, ack_wait=10 * SEC)
    _pull(store, events, batch=2)
    assert store.next_deadline() == T0 + 10 * SEC
    store.tick(clock.advance(10 * SEC)).result(timeout=10)
    evs = _pull(store, events, batch=3)
    assert _seqs(evs) == [1, 2, 3]
    counts = [e.delivered_count for e in evs if isinstance(e, Delivery)]
    assert counts == [2, 2, 1]
    info = store.consumer_info("S", "c")
    assert (info.delivered.consumer_seq, info.num_redelivered) == (5, 2)


def test_backoff_sets_each_deadline(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, backoff=[SEC, 5 * SEC], max_deliver=5)
    _pull(store, events)
    assert store.next_deadline() == T0 + SEC
    store.tick(clock.advance(SEC)).result(timeout=10)
    _pull(store, events)
    assert store.next_deadline() == clock.now + 5 * SEC


def test_max_deliver_stops_and_advises(store: Store, events: Events, clock: FakeClock) -> None:
    """As nats-server 2.15.1 (measured): due again after max_deliver deliveries, the
    message stays ack-pending until the next delivery would go out; that drops it (no
    delivery) with the advisory."""
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=SEC, max_deliver=2)
    _pull(store, events)
    store.tick(clock.advance(SEC)).result(timeout=10)
    assert _seqs(_pull(store, events)) == [1]
    store.tick(clock.advance(SEC)).result(timeout=10)
    assert not [e for e in events.take() if isinstance(e, Advisory)]
    assert store.consumer_info("S", "c").num_ack_pending == 1
    evs = _pull(store, events, no_wait=True)
    assert _seqs(evs) == []
    adv = [e for e in evs if isinstance(e, Advisory)]
    assert [(a.kind, a.stream_seq, a.deliveries) for a in adv] == [("max_deliver", 1, 2)]
    store.tick(clock.advance(SEC)).result(timeout=10)
    assert _seqs(_pull(store, events)) == []
    info = store.consumer_info("S", "c")
    assert (info.num_ack_pending, info.num_redelivered) == (0, 1)
    assert info.ack_floor.stream_seq == 0


def test_the_floor_passes_messages_given_up_on(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """As nats-server 2.15.1 (measured, test_redelivery_nats.py): an ack just above the
    floor moves it past messages given up on (max_deliver); acks of those move nothing."""
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c", "s.d")
    _consumer(store, ack_wait=10 * SEC, max_deliver=1)
    _pull(store, events, batch=4)
    clock.advance(5 * SEC)
    store.ack("S", "c", 1, AckKind.WPI)
    store.ack("S", "c", 4, AckKind.WPI)
    store.tick(clock.advance(5 * SEC)).result(timeout=10)  # 2 and 3 given up
    store.ack("S", "c", 2)
    assert _floor(store) == (0, 0)
    store.ack("S", "c", 1)
    assert _floor(store) == (3, 3)  # below 4, the next waiting for an ack
    store.ack("S", "c", 3, AckKind.TERM)
    assert _floor(store) == (3, 3)
    store.ack("S", "c", 4)
    assert _floor(store) == (4, 4)


def test_an_update_of_the_ack_wait_retimes_messages_already_out(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """As nats-server 2.15.1 (measured, test_redelivery_nats.py): pending messages wait
    for the new ack_wait (or backoff), counted from their delivery."""
    _stream(store)
    _fill(store, "s.a", "s.b")
    cfg = {"durable_name": "c", "ack_policy": "explicit", "ack_wait": 10 * SEC}
    store.create_consumer("S", cfg)
    _pull(store, events)  # message 1 at 0: due at 10 s
    clock.advance(2 * SEC)
    _pull(store, events)  # message 2 at 2 s: due at 12 s
    store.create_consumer("S", cfg | {"ack_wait": 4 * SEC}, action="update")
    assert store.next_deadline() == T0 + 4 * SEC
    store.tick(clock.advance(2 * SEC)).result(timeout=10)  # 4 s
    assert _seqs(_pull(store, events, batch=2)) == [1]
    store.create_consumer("S", cfg | {"backoff": [SEC, 20 * SEC], "max_deliver": 5}, "update")
    # Message 2 (first delivery at 2 s: 1 s) is overdue; message 1 (its second, at 4 s)
    # waits 20 s.
    assert _seqs(_pull(store, events, batch=2)) == [2]
    assert store.next_deadline() == T0 + 24 * SEC  # both: a second delivery at 4 s


def test_max_deliver_one_drops_as_the_ack_wait_ends(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """As nats-server 2.15.1 (measured, test_redelivery_nats.py): with max_deliver 1 the
    Tick that ends the ack wait drops the message, no request needed."""
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=SEC, max_deliver=1)
    _pull(store, events)
    store.tick(clock.advance(SEC)).result(timeout=10)
    adv = [e for e in events.take() if isinstance(e, Advisory)]
    assert [(a.kind, a.stream_seq, a.deliveries) for a in adv] == [("max_deliver", 1, 1)]
    assert store.consumer_info("S", "c").num_ack_pending == 0


def test_max_ack_pending_stops_delivery(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store, max_ack_pending=2)
    assert _seqs(_pull(store, events, batch=3)) == [1, 2]
    store.ack("S", "c", 1)
    assert _seqs(events.take()) == [3]


def test_nak_now_and_with_delay(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store)
    _pull(store, events)
    store.ack("S", "c", 1, AckKind.NAK)
    assert _seqs(_pull(store, events)) == [1]
    store.ack("S", "c", 1, AckKind.NAK, delay_ns=3 * SEC)
    assert _seqs(_pull(store, events)) == [2]
    store.pull("S", "c", "inbox")
    store.tick(clock.advance(3 * SEC)).result(timeout=10)
    evs = events.take()
    assert _seqs(evs) == [1]
    assert [e.delivered_count for e in evs if isinstance(e, Delivery)] == [3]


def test_a_pending_message_deleted_is_advised_terminated(
    store: Store, events: Events, clock: FakeClock
) -> None:
    # As nats-server 2.15.1 (measured, test_redelivery_nats.py): deleted, dropped by a
    # limit or expired while pending, not purged; "deliveries" is the redeliveries.
    _stream(store, max_msgs=4)
    _fill(store, "s.a", "s.b", "s.c", "s.d")
    _consumer(store, ack_wait=SEC)
    _pull(store, events, batch=4)
    for _ in range(2):  # messages 1 and 2 delivered three times, 3 and 4 once
        store.ack("S", "c", 1, AckKind.NAK)
        store.ack("S", "c", 2, AckKind.NAK)
        _pull(store, events, batch=2)
    _fill(store, "s.e")  # max_msgs: message 1 goes
    store.delete_msg("S", 2)
    store.delete_msg("S", 3)
    store.purge_stream("S")  # 4 and 5: no advisory
    advisories = [e for e in events.take() if isinstance(e, Advisory)]
    assert [(a.kind, a.stream_seq, a.deliveries, a.reason) for a in advisories] == [
        ("terminated", 1, 2, "Unacknowledged message was deleted"),
        ("terminated", 2, 2, "Unacknowledged message was deleted"),
        ("terminated", 3, 1, "Unacknowledged message was deleted"),
    ]
    info = store.consumer_info("S", "c")
    assert info.num_ack_pending == 0


def test_wpi_resets_the_timer(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=10 * SEC)
    _pull(store, events)
    clock.advance(8 * SEC)
    store.ack("S", "c", 1, AckKind.WPI)
    store.pull("S", "c", "inbox")
    store.tick(clock.advance(4 * SEC)).result(timeout=10)
    assert _seqs(events.take()) == []
    store.tick(clock.advance(6 * SEC)).result(timeout=10)
    assert _seqs(events.take()) == [1]


def test_wpi_after_the_ack_wait_ended_leaves_it_due(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """As nats-server 2.15.1 (measured, test_redelivery_nats.py): a message whose ack
    wait ended (ticked or not) or that a NAK queued goes out at the next pull all the
    same."""
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store, ack_wait=10 * SEC)
    _pull(store, events, batch=2)
    store.ack("S", "c", 2, AckKind.NAK)
    clock.advance(11 * SEC)  # message 1's ack wait ended; no Tick yet
    store.ack("S", "c", 1, AckKind.WPI)
    store.ack("S", "c", 2, AckKind.WPI)
    assert _seqs(_pull(store, events, batch=2)) == [1, 2]


def test_term_stops_redelivery_and_advises(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=SEC)
    _pull(store, events)
    store.ack("S", "c", 1, AckKind.TERM, reason="bad payload")
    evs = events.take()
    assert [(a.kind, a.reason) for a in evs if isinstance(a, Advisory)] == [
        ("terminated", "bad payload")
    ]
    store.pull("S", "c", "inbox")
    store.tick(clock.advance(5 * SEC)).result(timeout=10)
    assert _seqs(events.take()) == []
    assert store.consumer_info("S", "c").ack_floor.stream_seq == 1


def test_nxt_acks_and_requests_more(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store)
    _pull(store, events)
    store.submit([Ack("S", "c", 1, AckKind.NEXT, next_reply="inbox2")]).result(timeout=10)
    evs = events.take()
    assert [(e.reply, e.msg.seq) for e in evs if isinstance(e, Delivery)] == [("inbox2", 2)]
    assert store.consumer_info("S", "c").ack_floor.stream_seq == 1


# -- pull statuses ---------------------------------------------------------------------------


def test_no_wait_with_nothing_is_404(store: Store, events: Events) -> None:
    _stream(store)
    _consumer(store)
    assert _statuses(_pull(store, events, no_wait=True)) == [(404, "No Messages")]
    assert store.consumer_info("S", "c").num_waiting == 0


def test_expires_gives_408_with_pending_counts(
    store: Store, events: Events, clock: FakeClock
) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store)
    evs = _pull(store, events, batch=3, expires_ns=5 * SEC)
    assert _seqs(evs) == [1]
    assert store.consumer_info("S", "c").num_waiting == 1
    assert store.next_deadline() == T0 + 5 * SEC
    store.tick(clock.advance(5 * SEC)).result(timeout=10)
    st = [e for e in events.take() if isinstance(e, PullStatus)]
    assert [(s.code, s.description, s.pending_msgs) for s in st] == [(408, "Request Timeout", 2)]


def test_max_bytes_409(store: Store, events: Events) -> None:
    """As nats-server 2.15.1 (measured): a delivery counts its subject, headers, payload
    and ack reply subject; one that does not fit ends the request with 409 (after other
    messages too), a max_bytes used up exactly ends it without a status."""
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store)
    assert _statuses(_pull(store, events, max_bytes=5)) == [(409, "Message Size Exceeds MaxBytes")]
    # "$JS.ACK.S.c.1.<seq>.<cseq>.<19-digit time>.<pending>": 12 + 1 + 1 + 1 + 19 + 1 + 4
    one = len("s.a") * 2 + 39  # subject, the same as payload, reply
    evs = _pull(store, events, batch=5, max_bytes=2 * one - 1)
    assert _seqs(evs) == [1]
    assert _statuses(evs) == [(409, "Message Size Exceeds MaxBytes")]
    evs = _pull(store, events, batch=5, max_bytes=2 * one)
    assert _seqs(evs) == [2, 3]
    assert _statuses(evs) == []
    assert store.consumer_info("S", "c").num_waiting == 0


def test_no_wait_ends_with_404_after_some_messages_too(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store)
    evs = _pull(store, events, batch=3, no_wait=True)
    assert _seqs(evs) == [1]
    assert _statuses(evs) == [(404, "No Messages")]


def _replies(evs: list[Any]) -> list[tuple[str, int | str]]:
    """Each event's inbox with its stream seq (a delivery) or status code."""
    return [
        (e.reply, e.msg.seq if isinstance(e, Delivery) else f"{e.code} {e.description}")
        for e in evs
        if isinstance(e, Delivery | PullStatus)
    ]


def test_waiting_requests_take_one_message_each_in_turn(store: Store, events: Events) -> None:
    """As nats-server's wait queue: a request that still wants more goes to the back."""
    _stream(store)
    _consumer(store)
    store.pull("S", "c", "a", batch=3)
    store.pull("S", "c", "b", batch=1)
    store.pull("S", "c", "x", batch=2)
    store.submit([Publish("s.a", b"")] * 5).result(timeout=10)
    assert _replies(events.take()) == [("a", 1), ("b", 2), ("x", 3), ("a", 4), ("x", 5)]
    assert store.consumer_info("S", "c").num_waiting == 1  # a wants one more


def test_no_wait_behind_a_waiting_request(store: Store, events: Events) -> None:
    """Answered before it queues (nats-server 2.15.1, measured): 404 when nothing is there;
    408 "Requests Pending" when the requests ahead take everything there is."""
    _stream(store)
    _consumer(store, max_ack_pending=1)
    store.pull("S", "c", "a", batch=3)
    store.pull("S", "c", "b", no_wait=True)
    assert _replies(events.take()) == [("b", "404 No Messages")]
    _fill(store, "s.a", "s.b")  # a takes one; max_ack_pending holds the other back
    store.pull("S", "c", "b", batch=3, no_wait=True)
    store.pull("S", "c", "d", batch=3, no_wait=True, expires_ns=SEC)
    assert _replies(events.take()) == [
        ("a", 1),
        ("b", "408 Requests Pending"),
        ("d", "408 Requests Pending"),
    ]
    assert store.consumer_info("S", "c").num_waiting == 1


def test_no_wait_with_expires_waits_for_its_first_message(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """Then it ends with 404 if unfilled; with no message before it expires, 408."""
    _stream(store)
    _consumer(store)
    store.pull("S", "c", "d", batch=3, no_wait=True, expires_ns=5 * SEC)
    assert _replies(events.take()) == []
    assert store.consumer_info("S", "c").num_waiting == 1
    _fill(store, "s.a")
    assert _replies(events.take()) == [("d", 1), ("d", "404 No Messages")]
    store.pull("S", "c", "e", batch=3, no_wait=True, expires_ns=5 * SEC)
    store.tick(clock.advance(5 * SEC)).result(timeout=10)
    assert _replies(events.take()) == [("e", "408 Request Timeout")]
    assert store.consumer_info("S", "c").num_waiting == 0


def test_no_wait_polls_keep_an_ephemeral_consumer_alive(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """A no_wait pull answered 404 at once is activity all the same (as nats-server)."""
    _stream(store)
    store.create_consumer(
        "S", {"name": "e", "ack_policy": "explicit", "inactive_threshold": 5 * SEC}
    )
    for _ in range(4):
        store.tick(clock.advance(3 * SEC)).result(timeout=10)
        assert _statuses(_pull(store, events, c="e", no_wait=True)) == [(404, "No Messages")]
    store.tick(clock.advance(5 * SEC)).result(timeout=10)
    assert store.consumer_names("S") == []


def test_idle_heartbeats_while_a_request_waits(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """Every idle_heartbeat since its last message or heartbeat, with the consumer's last
    delivery; none past its expiry. More than half the expiry is refused, as nats-server."""
    _stream(store)
    _consumer(store)
    store.pull("S", "c", "h", batch=5, expires_ns=5 * SEC, idle_heartbeat_ns=SEC)
    assert store.next_deadline() == T0 + SEC

    def tick_at(ns: int) -> list[tuple[str, int, int]]:
        clock.now = T0 + ns
        store.tick(clock.now).result(timeout=10)
        return [
            (f"{e.code}", e.last_consumer_seq, e.last_stream_seq)
            for e in events.take()
            if isinstance(e, PullStatus)
        ]

    assert tick_at(SEC) == [("100", 0, 0)]
    clock.now = T0 + 3 * SEC // 2
    _fill(store, "s.a")
    assert _seqs(events.take()) == [1]
    assert store.next_deadline() == T0 + 5 * SEC // 2  # from the message on
    assert tick_at(2 * SEC) == []
    assert tick_at(5 * SEC // 2) == [("100", 1, 1)]
    assert tick_at(9 * SEC // 2) == [("100", 1, 1)]  # late: one, then on from here
    assert tick_at(5 * SEC) == [("408", 0, 0)]
    assert store.consumer_info("S", "c").num_waiting == 0
    for expires in (SEC, 0):
        assert _statuses(_pull(store, events, expires_ns=expires, idle_heartbeat_ns=SEC)) == [
            (400, "Bad Request - heartbeat value too large")
        ]
    assert _statuses(_pull(store, events, expires_ns=SEC, idle_heartbeat_ns=-1)) == [
        (400, "Bad Request - negative value")
    ]


def test_a_pull_without_a_batch_is_a_batch_of_one(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store)
    assert _seqs(_pull(store, events, batch=0, no_wait=True)) == [1]


def test_request_caps_409(store: Store, events: Events) -> None:
    _stream(store)
    _consumer(store, max_batch=2, max_expires=SEC, max_bytes=100, max_waiting=1)
    assert _statuses(_pull(store, events, batch=3)) == [(409, "Exceeded MaxRequestBatch of 2")]
    assert _statuses(_pull(store, events, expires_ns=2 * SEC)) == [
        (409, "Exceeded MaxRequestExpires of 1s")  # Go's duration text, as nats-server
    ]
    assert _statuses(_pull(store, events, max_bytes=200)) == [
        (409, "Exceeded MaxRequestMaxBytes of 100")
    ]
    assert _pull(store, events) == []
    assert _statuses(_pull(store, events)) == [(409, "Exceeded MaxWaiting")]


def test_pull_on_push_consumer_is_409(store: Store, events: Events) -> None:
    _stream(store)
    _consumer(store, deliver_subject="out")
    assert _statuses(_pull(store, events)) == [(409, "Consumer is push based")]


def test_waiting_pull_gets_new_messages_and_consumer_deleted(store: Store, events: Events) -> None:
    _stream(store)
    _consumer(store)
    assert _pull(store, events, batch=2) == []
    _fill(store, "s.a")
    assert _seqs(events.take()) == [1]
    store.delete_consumer("S", "c")
    assert _statuses(events.take()) == [(409, "Consumer Deleted")]


# -- push ------------------------------------------------------------------------------------


def test_push_delivers_only_with_interest(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, deliver_subject="out.c")
    assert events.take() == []
    store.set_push_interest("S", "c", True)
    evs = events.take()
    assert [(e.reply, e.msg.seq) for e in evs if isinstance(e, Delivery)] == [("out.c", 1)]
    assert store.consumer_info("S", "c").push_bound is True
    _fill(store, "s.b")
    assert _seqs(events.take()) == [2]
    store.set_push_interest("S", "c", False)
    _fill(store, "s.c")
    assert events.take() == []


def test_inactive_ephemeral_is_deleted(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    info = store.create_consumer("S", {"ack_policy": "explicit", "inactive_threshold": 2 * SEC})
    assert store.next_deadline() == T0 + 2 * SEC
    store.tick(clock.advance(2 * SEC)).result(timeout=10)
    assert store.consumer_names("S") == []
    assert [(e.kind, e.consumer) for e in events.take() if isinstance(e, Advisory)] == [
        ("consumer_deleted", info.name)
    ]


def test_the_wait_for_a_new_request_starts_when_the_last_one_leaves(
    store: Store, events: Events, clock: FakeClock
) -> None:
    # Expired or filled: the client's next request (sent when it sees the end) finds the
    # consumer there, as on nats-server (test_redelivery_nats.py).
    _stream(store)
    cfg = {"name": "e", "ack_policy": "none", "inactive_threshold": 2 * SEC}
    store.create_consumer("S", cfg)
    store.pull("S", "e", "r1", batch=1, expires_ns=5 * SEC)
    store.tick(clock.advance(5 * SEC)).result(timeout=10)  # 408; was deleted here
    assert store.consumer_names("S") == ["e"]
    assert store.next_deadline() == clock.now + 2 * SEC
    store.pull("S", "e", "r2", batch=1, expires_ns=10 * SEC)
    clock.advance(3 * SEC)
    _fill(store, "s.a")  # fills it
    assert store.consumer_names("S") == ["e"]
    assert store.next_deadline() == clock.now + 2 * SEC
    store.tick(clock.advance(2 * SEC)).result(timeout=10)
    assert store.consumer_names("S") == []


def test_withdrawn_requests_leave_silently_and_start_the_wait(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """A requester that went away (its inbox lost interest): its waiting requests leave
    without a status, take nothing, and the inactivity wait starts then."""
    _stream(store)
    cfg = {"name": "e", "ack_policy": "none", "inactive_threshold": 2 * SEC}
    store.create_consumer("S", cfg)
    store.pull("S", "e", "gone", batch=5)  # no expiry: it would wait forever
    store.pull("S", "e", "gone", batch=1)
    store.pull("S", "e", "here", batch=1)
    assert store.withdraw_pulls("S", "e", "gone") == 2
    assert store.withdraw_pulls("S", "e", "gone") == 0
    assert store.consumer_info("S", "e").num_waiting == 1
    _fill(store, "s.a")
    evs = events.take()
    assert [(e.reply, e.msg.seq) for e in evs if isinstance(e, Delivery)] == [("here", 1)]
    assert [e for e in evs if isinstance(e, PullStatus)] == []
    store.pull("S", "e", "gone2", batch=1)
    clock.advance(SEC)
    store.withdraw_pulls("S", "e", "gone2")
    assert store.next_deadline() == clock.now + 2 * SEC
    store.tick(clock.advance(2 * SEC)).result(timeout=10)
    assert store.consumer_names("S") == []


def test_messages_waiting_for_acks_keep_a_consumer(
    store: Store, events: Events, clock: FakeClock
) -> None:
    # As nats-server 2.15.1 (measured): not inactive while an ack wait runs.
    _stream(store)
    cfg = {"name": "e", "ack_policy": "explicit", "ack_wait": 30 * SEC}
    store.create_consumer("S", cfg | {"inactive_threshold": 2 * SEC})
    _fill(store, "s.a", "s.b")
    _pull(store, events, batch=2, c="e")
    clock.advance(10 * SEC)
    store.ack("S", "e", 1, AckKind.WPI)  # message 1: due at 40 s
    assert store.next_deadline() == T0 + 30 * SEC
    store.tick(clock.advance(20 * SEC)).result(timeout=10)  # 30 s: message 2 due
    assert store.consumer_names("S") == ["e"]
    assert store.next_deadline() == T0 + 40 * SEC
    store.tick(clock.advance(10 * SEC)).result(timeout=10)  # 40 s: message 1 due
    assert store.next_deadline() == T0 + 42 * SEC
    store.tick(clock.advance(2 * SEC)).result(timeout=10)
    assert store.consumer_names("S") == []
    # All acked: no ack wait left, the time from the last ack counts.
    store.create_consumer("S", cfg | {"inactive_threshold": 2 * SEC})
    _pull(store, events, batch=2, c="e")
    clock.advance(SEC)
    store.ack("S", "e", 1, AckKind.NAK, delay_ns=100 * SEC)
    store.ack("S", "e", 1)
    store.ack("S", "e", 2)
    assert store.next_deadline() == clock.now + 2 * SEC
    # ... and a later delivery's ack wait counts, not the NAK's delay before it.
    _fill(store, "s.c")
    _pull(store, events, c="e")
    assert store.next_deadline() == clock.now + 30 * SEC
    store.tick(clock.advance(30 * SEC)).result(timeout=10)
    assert store.next_deadline() == clock.now + 2 * SEC


# -- retention -------------------------------------------------------------------------------


def test_interest_removed_when_every_matching_consumer_acked(store: Store, events: Events) -> None:
    _stream(store, retention="interest")
    _consumer(store, "a")
    _consumer(store, "b")
    _fill(store, "s.x")
    _pull(store, events, c="a")
    _pull(store, events, c="b")
    store.ack("S", "a", 1)
    assert store.stream_state("S").messages == 1
    store.ack("S", "b", 1)
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (0, 2, 1)


def test_interest_consumer_delete_releases(store: Store) -> None:
    _stream(store, retention="interest")
    _consumer(store, "a")
    _fill(store, "s.x", "s.y")
    store.delete_consumer("S", "a")
    assert store.stream_state("S").messages == 0


def test_interest_filtered_consumers(store: Store, events: Events) -> None:
    _stream(store, retention="interest")
    _consumer(store, "a", filter_subject="s.a")
    _fill(store, "s.b")  # nobody interested: not stored
    _fill(store, "s.a")
    assert store.stream_state("S").messages == 1


def test_workqueue_removes_on_first_ack(store: Store, events: Events) -> None:
    _stream(store, retention="workqueue")
    _fill(store, "s.a", "s.b")
    _consumer(store)
    _pull(store, events, batch=2)
    store.ack("S", "c", 1)
    store.ack("S", "c", 2, AckKind.TERM)
    st = store.stream_state("S")
    assert (st.messages, st.first_seq, st.last_seq) == (0, 3, 2)


def test_workqueue_consumer_rules(store: Store) -> None:
    _stream(store, retention="workqueue")
    assert _err(_consumer, store, "x", ack_policy="none").err_code == 10098
    assert _err(_consumer, store, "x", deliver_policy="new").err_code == 10101
    _consumer(store, "a", filter_subject="s.a")
    assert _err(_consumer, store, "b").err_code == 10099
    assert _err(_consumer, store, "b", filter_subject="s.*").err_code == 10100
    _consumer(store, "b", filter_subject="s.b")


# -- persistence -----------------------------------------------------------------------------


def test_consumer_state_and_pending_survive_restart(tmp_path: Path, clock: FakeClock) -> None:
    ev = Events()
    with Store.open(tmp_path / "d", clock=clock, on_event=ev) as s:
        _stream(s)
        _fill(s, "s.a", "s.b", "s.c")
        _consumer(s, ack_wait=10 * SEC)
        _pull(s, ev, batch=3)
        s.ack("S", "c", 2)
        before = s.consumer_info("S", "c")
    with Store.open(tmp_path / "d", clock=clock, on_event=ev) as s:
        after = s.consumer_info("S", "c")
        assert after.delivered == before.delivered
        assert after.ack_floor == before.ack_floor
        assert after.num_ack_pending == 2
        assert s.next_deadline() == T0 + 10 * SEC
        s.pull("S", "c", "inbox", batch=5)
        s.tick(clock.advance(10 * SEC)).result(timeout=10)
        evs = ev.take()
        assert _seqs(evs) == [1, 3]
        assert [e.delivered_count for e in evs if isinstance(e, Delivery)] == [2, 2]


def test_interest_keeps_message_that_hit_max_deliver(
    store: Store, events: Events, clock: FakeClock
) -> None:
    _stream(store, retention="interest")
    _consumer(store, ack_wait=SEC, max_deliver=1)
    _fill(store, "s.a")
    _pull(store, events)
    store.tick(clock.advance(SEC)).result(timeout=10)
    evs = _pull(store, events, no_wait=True)  # the delivery that drops it
    assert [e.kind for e in evs if isinstance(e, Advisory)] == ["max_deliver"]
    assert store.stream_state("S").messages == 1


def test_interest_ack_none_releases_on_delivery(store: Store, events: Events) -> None:
    _stream(store, retention="interest")
    _consumer(store, ack_policy="none")
    _fill(store, "s.a", "s.b")
    assert _seqs(_pull(store, events, batch=1)) == [1]
    st = store.stream_state("S")
    assert (st.messages, st.first_seq) == (1, 2)


def test_pending_message_deleted_is_not_redelivered(
    store: Store, events: Events, clock: FakeClock
) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store, ack_wait=SEC)
    _pull(store, events, batch=2)
    store.delete_msg("S", 1)
    info = store.consumer_info("S", "c")
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (1, 1)
    store.pull("S", "c", "inbox", batch=5)
    store.tick(clock.advance(SEC)).result(timeout=10)
    assert _seqs(events.take()) == [2]


def test_purge_moves_consumers_forward(store: Store, events: Events) -> None:
    _stream(store)
    _fill(store, "s.a", "s.b", "s.c")
    _consumer(store)
    assert store.consumer_info("S", "c").num_pending == 3
    store.purge_stream("S")
    info = store.consumer_info("S", "c")
    assert (info.num_pending, info.delivered.stream_seq) == (0, 3)
    _fill(store, "s.d")
    assert _seqs(_pull(store, events)) == [4]


def test_one_batch_appends_acks_and_pulls(store: Store, events: Events) -> None:
    _stream(store)
    _stream(store, name="T", subjects=["t.>"])
    _consumer(store)
    _fill(store, "s.a")
    _pull(store, events)
    res = store.submit(
        [
            Publish("s.b", b"1"),
            Publish("t.x", b"2"),
            Ack("S", "c", 1),
            Pull("S", "c", "inbox", batch=1),
            Ack("S", "nope", 1),
        ]
    ).result(timeout=10)
    assert [getattr(r, "seq", None) for r in res[:2]] == [2, 1]
    assert res[2] is None
    assert isinstance(res[4], JetStreamError)
    assert res[4].err_code == 10014
    assert _seqs(events.take()) == [2]
    assert store.consumer_info("S", "c").ack_floor.stream_seq == 1


def test_delivery_is_bounded_per_batch_and_resumes_on_tick(store: Store, events: Events) -> None:
    cap = MAX_DELIVERIES_PER_BATCH
    _stream(store)
    store.submit([Publish("s.a", b"") for _ in range(cap + 10)]).result(timeout=30)
    _consumer(store, ack_policy="none", deliver_subject="out")
    store.set_push_interest("S", "c", True)
    assert len(_seqs(events.take())) == cap
    due = store.next_deadline()
    assert due is not None
    assert due <= T0
    store.tick().result(timeout=10)
    assert len(_seqs(events.take())) == 10
    assert store.next_deadline() is None


def test_identical_recreate_after_restart_is_idempotent(tmp_path: Path, clock: FakeClock) -> None:
    cfg = {"durable_name": "c", "ack_policy": "explicit", "filter_subject": "s.a"}
    scfg = {"name": "S", "subjects": ["s.>"], "max_age": 60 * SEC}
    with Store.open(tmp_path / "d", clock=clock) as s:
        s.create_stream(scfg)
        s.create_consumer("S", cfg, action="create")
    with Store.open(tmp_path / "d", clock=clock) as s:
        s.create_stream(scfg)
        s.create_consumer("S", cfg, action="create")
        assert s.consumer_names("S") == ["c"]


def test_headers_only_delivers_size_header(store: Store, events: Events) -> None:
    _stream(store)
    store.publish("s.a", b"12345", (("X", "1"),))
    _consumer(store, headers_only=True)
    (d,) = [e for e in _pull(store, events) if isinstance(e, Delivery)]
    assert d.msg.payload == b""
    assert d.msg.headers == (("X", "1"), ("Nats-Msg-Size", "5"))


def test_advisory_wire_shape(store: Store, events: Events, clock: FakeClock) -> None:
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=SEC, max_deliver=1)
    _pull(store, events)
    store.tick(clock.advance(SEC)).result(timeout=10)
    (adv,) = [e for e in _pull(store, events, no_wait=True) if isinstance(e, Advisory)]
    subject, body = adv.to_wire("id1")
    assert subject == "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.c"
    assert body == {
        "type": "io.nats.jetstream.advisory.v1.max_deliver",
        "id": "id1",
        "timestamp": format_time(T0 + SEC),
        "stream": "S",
        "consumer": "c",
        "stream_seq": 1,
        "deliveries": 1,
    }


def test_replay_original_is_refused_not_faked(store: Store) -> None:
    _stream(store)
    e = _err(_consumer, store, replay_policy="original")
    assert e.err_code == 10012


def test_aborted_batch_restores_pull_requests(store: Store, events: Events) -> None:
    _stream(store)
    _consumer(store)
    store.pull("S", "c", "inbox", batch=3)
    eng = store._engine
    job = Job([Publish("s.a", b"1"), Publish("s.b", b"2")])
    # The writer is idle (and no submission can get in while we hold its lock): drive one
    # batch by hand, then abort it as the writer would.
    with store._writer._lock:
        txn = store.env.begin_write()
        eng.apply(txn, [job])
        assert eng.streams["S"].consumers["c"].waiting[0].batch == 1
        txn.abort()
        eng.reset()
    assert store.stream_state("S").messages == 0
    assert eng.streams["S"].consumers["c"].waiting[0].batch == 3
    _fill(store, "s.a", "s.b", "s.c", "s.d")
    assert _seqs(events.take()) == [1, 2, 3]
    assert store.consumer_info("S", "c").num_waiting == 0


def test_nak_of_a_queued_redelivery_sends_it_once(
    store: Store, events: Events, clock: FakeClock
) -> None:
    # Regression (found by the consumer model test): a message already queued for
    # redelivery by ack_wait and then NAKed was redelivered twice in one pull.
    _stream(store)
    _fill(store, "s.a")
    _consumer(store, ack_wait=10 * SEC)
    _pull(store, events)
    store.tick(clock.advance(10 * SEC)).result(timeout=10)
    store.ack("S", "c", 1, AckKind.NAK)
    evs = _pull(store, events, batch=2, no_wait=True)
    assert [(e.msg.seq, e.delivered_count) for e in evs if isinstance(e, Delivery)] == [(1, 2)]


def test_term_under_ack_all_acks_everything_up_to_it(store: Store, events: Events) -> None:
    """As nats-server 2.15.1 (measured): with ack_policy all, +TERM n is an ack of every
    message up to n (and the terminated advisory for n); the next pull gets n + 1 on."""
    _stream(store)
    _fill(store, *(["s.a"] * 6))
    _consumer(store, ack_policy="all")
    assert _seqs(_pull(store, events, batch=5)) == [1, 2, 3, 4, 5]
    store.ack("S", "c", 3, AckKind.TERM)
    evs = events.take()
    info = store.consumer_info("S", "c")
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (2, 3)
    assert [e.kind for e in evs if isinstance(e, Advisory)] == ["terminated"]
    store.ack("S", "c", 5)
    assert store.consumer_info("S", "c").num_ack_pending == 0
    assert _seqs(_pull(store, events, batch=5)) == [6]


def test_nak_after_max_deliver_deliveries_is_not_redelivered(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """A -NAK of a message already delivered max_deliver times does not send it again (it
    was, a third time with max_deliver 2: found against nats-server). As there (2.15.1,
    measured), it stays ack-pending until the next delivery would go out, which drops it
    with the advisory instead (and delivers the next message)."""
    _stream(store)
    _fill(store, "s.a", "s.b")
    _consumer(store, max_deliver=2, ack_wait=30 * SEC)
    assert _seqs(_pull(store, events)) == [1]
    store.ack("S", "c", 1, AckKind.NAK)
    assert _seqs(_pull(store, events)) == [1]  # the second delivery
    store.ack("S", "c", 1, AckKind.NAK)
    info = store.consumer_info("S", "c")
    assert (info.num_ack_pending, info.num_redelivered) == (1, 1)
    evs = _pull(store, events, batch=2)
    assert _seqs(evs) == [2]
    assert [(a.kind, a.stream_seq, a.deliveries) for a in evs if isinstance(a, Advisory)] == [
        ("max_deliver", 1, 2)
    ]
    info = store.consumer_info("S", "c")
    assert (info.num_ack_pending, info.num_redelivered) == (1, 1)
    store.tick(clock.advance(31 * SEC)).result(timeout=30)
    evs = events.take()
    assert _seqs(evs) == [2]  # message 2's ack wait ran out: redelivered
    assert not [a for a in evs if isinstance(a, Advisory)]
    assert store.consumer_info("S", "c").num_ack_pending == 1


def test_a_nak_queued_at_a_restart_is_redelivered_after_it(tmp_path: Path) -> None:
    """A message NAKed without a delay and not yet redelivered when the store closes is
    redelivered first after it reopens (it stayed ack-pending forever)."""
    events = Events()
    with Store.open(tmp_path / "d", clock=FakeClock(), on_event=events) as s:
        _stream(s)
        _consumer(s)
        _fill(s, "s.a", "s.a")
        assert _seqs(_pull(s, events)) == [1]
        s.ack("S", "c", 1, AckKind.NAK)
    with Store.open(tmp_path / "d", clock=FakeClock(), on_event=events) as s:
        got = [e for e in _pull(s, events, batch=2, no_wait=True) if isinstance(e, Delivery)]
        assert [(e.msg.seq, e.delivered_count) for e in got] == [(1, 2), (2, 1)]


def test_deadlines_of_acked_messages_do_not_pile_up(
    store: Store, events: Events, clock: FakeClock
) -> None:
    """One message left unacked while thousands are delivered and acked: the heap of ack
    deadlines stays about the size of what is pending (it held one entry per delivery for
    the whole ack wait), and the unacked one is still redelivered when its wait ends."""
    _stream(store)
    _consumer(store, max_ack_pending=-1, ack_wait=30 * SEC)
    n = MAX_DELIVERIES_PER_BATCH  # (a pull of that many is filled in its own batch)
    for _ in range(20):
        store.submit([Publish("s.a", b"p") for _ in range(n)]).result(timeout=30)
        seqs = _seqs(_pull(store, events, batch=n))
        assert len(seqs) == n
        store.submit([Ack("S", "c", q, AckKind.ACK) for q in seqs if q != 1]).result(timeout=30)
    c = store._engine.streams["S"].consumers["c"]
    assert len(c.pending) == 1
    assert len(c.deadlines) <= 2 * len(c.pending) + 1024 + n
    clock.advance(31 * SEC)
    store.tick(clock.now).result(timeout=30)
    got = [e for e in _pull(store, events) if isinstance(e, Delivery)]
    assert [(e.msg.seq, e.delivered_count) for e in got] == [(1, 2)]

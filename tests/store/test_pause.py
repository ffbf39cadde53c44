"""Pausing consumers (store.pausing): pause_until at create, the pause operation,
no deliveries while paused, delivery again at the pause's end or on resume, the info
fields, and the pause surviving a restart. With an injected clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from store import Advisory, Delivery, JetStreamError, PullStatus, Store
from store.models import format_time
from tests.store.conftest import SEC, T0, Events, FakeClock

ZERO = "0001-01-01T00:00:00Z"


def _setup(store: Store, n: int = 3, **cfg: Any) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    for _ in range(n):
        store.publish("s.a", b"x")
    store.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit", **cfg})


def _seqs(evs: list[Any]) -> list[int]:
    return [e.msg.seq for e in evs if isinstance(e, Delivery)]


def _statuses(evs: list[Any]) -> list[tuple[int, str]]:
    return [(e.code, e.description) for e in evs if isinstance(e, PullStatus)]


def test_a_future_pause_until_at_create_pauses(store: Store, events: Events) -> None:
    until = format_time(T0 + 10 * SEC)
    _setup(store, pause_until=until)
    info = store.consumer_info("S", "c").to_wire()
    assert info["paused"] is True
    assert info["pause_remaining"] == 10 * SEC
    assert info["config"]["pause_until"] == until
    store.pull("S", "c", "inbox", batch=2)
    assert _seqs(events.take()) == []
    assert store.consumer_info("S", "c").num_waiting == 1


def test_a_past_pause_until_is_no_pause(store: Store, events: Events) -> None:
    _setup(store, pause_until="2001-01-01T00:00:00Z")
    info = store.consumer_info("S", "c").to_wire()
    assert "paused" not in info
    assert "pause_remaining" not in info
    assert info["config"]["pause_until"] == "2001-01-01T00:00:00Z"
    store.pull("S", "c", "inbox")
    assert _seqs(events.take()) == [1]


def test_no_wait_while_paused_is_404(store: Store, events: Events) -> None:
    _setup(store, pause_until=format_time(T0 + SEC))
    store.pull("S", "c", "inbox", no_wait=True)
    assert _statuses(events.take()) == [(404, "No Messages")]


def test_delivery_resumes_at_the_pause_end(store: Store, events: Events, clock: FakeClock) -> None:
    _setup(store)
    state = store.pause_consumer("S", "c", format_time(T0 + 5 * SEC))
    assert state.to_wire() == {
        "paused": True,
        "pause_until": format_time(T0 + 5 * SEC),
        "pause_remaining": 5 * SEC,
    }
    store.pull("S", "c", "inbox", batch=5)
    assert _seqs(events.take()) == []
    assert store.next_deadline() == T0 + 5 * SEC
    clock.advance(5 * SEC)
    store.tick().result(timeout=10)
    assert _seqs(events.take()) == [1, 2, 3]
    info = store.consumer_info("S", "c").to_wire()
    assert "paused" not in info
    assert store.next_deadline() != T0 + 5 * SEC  # (no tick loop on an ended pause)


def test_resume_delivers_to_waiting_requests(store: Store, events: Events) -> None:
    _setup(store, pause_until=format_time(T0 + 60 * SEC))
    store.pull("S", "c", "inbox", batch=5)
    assert _seqs(events.take()) == []
    state = store.pause_consumer("S", "c", ZERO)
    assert state.to_wire() == {"paused": False, "pause_until": ZERO}
    assert _seqs(events.take()) == [1, 2, 3]


def test_push_stops_while_paused(store: Store, events: Events) -> None:
    _setup(store, n=0, deliver_subject="d.x")
    store.set_push_interest("S", "c", True)
    store.pause_consumer("S", "c", format_time(T0 + 60 * SEC))
    store.publish("s.a", b"x")
    assert _seqs(events.take()) == []
    store.pause_consumer("S", "c", "2001-01-01T00:00:00Z")
    assert _seqs(events.take()) == [1]


def test_redeliveries_wait_for_the_pause(store: Store, events: Events, clock: FakeClock) -> None:
    _setup(store, n=1, ack_wait=SEC)
    store.pull("S", "c", "inbox", batch=5, expires_ns=100 * SEC)
    assert _seqs(events.take()) == [1]
    store.pause_consumer("S", "c", format_time(T0 + 10 * SEC))
    clock.advance(2 * SEC)
    store.tick().result(timeout=10)
    assert _seqs(events.take()) == []
    clock.advance(8 * SEC)
    store.tick().result(timeout=10)
    assert _seqs(events.take()) == [1]


def test_times_are_echoed_in_utc(store: Store) -> None:
    _setup(store)
    state = store.pause_consumer("S", "c", "2031-01-01T00:00:00.123456789+02:00")
    assert state.pause_until == "2030-12-31T22:00:00.123456789Z"
    info = store.consumer_info("S", "c")
    assert info.config.pause_until == "2030-12-31T22:00:00.123456789Z"


def test_pause_errors(store: Store) -> None:
    _setup(store)
    for args, code in (
        (("S", "nope", ZERO), 10014),
        (("X", "c", ZERO), 10059),
        (("S", "c", "soon"), 10025),
    ):
        with pytest.raises(JetStreamError) as ei:
            store.pause_consumer(*args)
        assert ei.value.err_code == code
    with pytest.raises(JetStreamError) as ei:
        store.pause_consumer("S", "c", "soon")
    assert ei.value.description == (
        'invalid JSON: parsing time "soon" as "2006-01-02T15:04:05Z07:00": '
        'cannot parse "soon" as "2006"'
    )


def test_the_pause_survives_a_restart(tmp_path: Path, clock: FakeClock, events: Events) -> None:
    with Store.open(tmp_path / "db", clock=clock, on_event=events, map_size=1 << 24) as s:
        _setup(s)
        s.pause_consumer("S", "c", format_time(T0 + 30 * SEC))
    with Store.open(tmp_path / "db", clock=clock, on_event=events, map_size=1 << 24) as s:
        info = s.consumer_info("S", "c").to_wire()
        assert info["paused"] is True
        assert info["pause_remaining"] == 30 * SEC
        s.pull("S", "c", "inbox")
        assert _seqs(events.take()) == []
        assert s.next_deadline() == T0 + 30 * SEC


def test_an_update_keeps_the_pause(store: Store) -> None:
    until = format_time(T0 + 10 * SEC)
    _setup(store, pause_until=until)
    for extra in ({}, {"pause_until": format_time(T0 + 99 * SEC)}):
        cfg = {"durable_name": "c", "ack_policy": "explicit", "max_deliver": 5, **extra}
        info = store.create_consumer("S", cfg, action="update").to_wire()
        assert info["config"]["pause_until"] == until
        assert info["pause_remaining"] == 10 * SEC


def _advisories(evs: list[Any]) -> list[tuple[str, dict[str, object]]]:
    out = []
    for e in evs:
        if isinstance(e, Advisory) and e.kind == "pause":
            subject, body = e.to_wire("id")
            out.append((subject, {k: body[k] for k in ("type", "paused", "pause_until")}))
    return out


def test_pause_advisories_as_nats_server(store: Store, events: Events, clock: FakeClock) -> None:
    """As measured on nats-server 2.15.1: at a create with a future pause, each pause, a
    resume of a paused consumer (not of one that is not), and when a pause ends."""
    subject = "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.c"
    kind = "io.nats.jetstream.advisory.v1.consumer_pause"
    first, later = format_time(T0 + 60 * SEC), format_time(T0 + 90 * SEC)
    _setup(store, n=0, pause_until=first)
    assert _advisories(events.take()) == [
        (subject, {"type": kind, "paused": True, "pause_until": first})
    ]
    store.pause_consumer("S", "c", later)
    assert _advisories(events.take()) == [
        (subject, {"type": kind, "paused": True, "pause_until": later})
    ]
    store.pause_consumer("S", "c", ZERO)
    assert _advisories(events.take()) == [
        (subject, {"type": kind, "paused": False, "pause_until": ZERO})
    ]
    store.pause_consumer("S", "c", ZERO)
    store.pause_consumer("S", "c", "2001-01-01T00:00:00Z")
    assert _advisories(events.take()) == []
    soon = format_time(T0 + 2 * SEC)
    store.pause_consumer("S", "c", soon)
    events.take()
    clock.advance(2 * SEC)
    store.tick().result(timeout=10)
    assert _advisories(events.take()) == [
        (subject, {"type": kind, "paused": False, "pause_until": soon})
    ]
    store.tick().result(timeout=10)
    assert _advisories(events.take()) == []

"""Reads for a start-up index: message heads without payloads, and many seqs in one read."""

from __future__ import annotations

import pytest

from store import JetStreamError, Store


def _fill(store: Store) -> None:
    store.create_stream({"name": "H", "subjects": ["h.>"]})
    store.publish("h.small", b"tiny", (("A", "1"),))
    store.publish("h.big", b"x" * 300_000, (("B", "2"), ("B", "3")))
    store.publish("h.empty", b"")


def test_heads_carry_everything_but_large_payloads(store: Store) -> None:
    _fill(store)
    full = list(store.iter_msgs("H"))
    heads = list(store.iter_heads("H", payload_upto=100))
    assert [(h.seq, h.time_ns, h.subject, h.headers, h.size) for h in heads] == [
        (m.seq, m.time_ns, m.subject, m.headers, len(m.payload)) for m in full
    ]
    assert [h.payload for h in heads] == [b"tiny", b"", b""]
    assert heads[1].header("B") == "3"
    assert [h.payload for h in store.iter_heads("H")] == [b"", b"", b""]


def test_heads_in_chunks_and_ranges(store: Store) -> None:
    store.create_stream({"name": "C", "subjects": ["c"]})
    for i in range(10):
        store.publish("c", str(i).encode())
    assert [h.seq for h in store.iter_heads("C", chunk=3)] == list(range(1, 11))
    assert [h.seq for h in store.iter_heads("C", start=4, end=6, chunk=2)] == [4, 5, 6]
    assert list(store.iter_heads("C", start=11)) == []


def test_get_msgs_reads_many_seqs_none_for_missing(store: Store) -> None:
    _fill(store)
    store.delete_msg("H", 1)
    got = store.get_msgs("H", [3, 1, 2, 99, 0])
    assert [None if m is None else m.subject for m in got] == [
        "h.empty",
        None,
        "h.big",
        None,
        None,
    ]
    with pytest.raises(JetStreamError):
        store.get_msgs("nope", [1])

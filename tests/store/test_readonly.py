"""The read side the pipeline imports: the environment opened read-only, decoded."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import SchemaError, Store, StoreClosedError, StoreOpenError, keys
from store.readonly import ReadOnlyEnv, Record


def test_a_reader_sees_the_streams_and_their_messages_decoded(tmp_path: Path) -> None:
    # (py-lmdb opens an environment once per process: the reader comes after the writer
    # here; the pipeline's readers are other processes.)
    with Store.open(tmp_path) as s:
        s.create_stream({"name": "A", "subjects": ["a.>"]})
        s.create_stream({"name": "B", "subjects": ["b.>"]})
        s.publish("a.1", b"one", headers=(("k", "v"),))
        s.publish("a.2", b"two")
        s.publish("b.1", b"other")
    with ReadOnlyEnv(tmp_path) as env:
        sids = env.streams()
        assert sorted(sids) == ["A", "B"]
        msgs = env.messages(sids["A"])
        assert [(m.seq, m.subject, m.headers, m.payload) for m in msgs] == [
            (1, "a.1", (("k", "v"),), b"one"),
            (2, "a.2", (), b"two"),
        ]
        assert all(isinstance(m, Record) and m.time_ns > 0 for m in msgs)
        assert env.messages(sids["A"], start=2) == msgs[1:]
        assert env.messages(sids["A"], limit=1) == msgs[:1]
        assert env.messages(sids["B"], start=5) == []
    with pytest.raises(StoreClosedError):
        env.messages(sids["A"])


def test_a_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(StoreOpenError):
        ReadOnlyEnv(tmp_path / "missing")
    # A schema this reader does not know.
    with Store.open(tmp_path / "d") as s:
        txn = s.env.begin_write()
        txn.put(keys.META_SCHEMA, keys.u32(keys.SCHEMA_VERSION + 1), db=s.env.dbs[keys.DB_META])
        txn.commit()
    with pytest.raises(SchemaError):
        ReadOnlyEnv(tmp_path / "d")

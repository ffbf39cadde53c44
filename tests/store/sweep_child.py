"""Child process for the interrupted-deletion tests: long work in small slices, killed.

Usage: ``python -m tests.store.sweep_child <dir> [stream|consumer|purge|trim]``.
``stream``: stores ``N`` messages in stream ``D`` on ``d.0`` … ``d.49``, prints
``SID <sid>``, submits the stream's deletion with ``remove_slice=5`` and prints
``SWEEPING`` once the first slice is committed (the stream is gone, its data is not).
``consumer``: stream ``D`` has interest retention and consumers ``a`` (on ``d.a``) and
``b`` (on ``d.b``); the deletion of ``b`` is submitted and ``SWEEPING`` printed once its
first slice of checks is committed (its ``meta`` recheck record written). ``purge``: as
``stream``, then a purge of ``d.*`` keeping the newest ``KEEP``. ``trim``: as ``stream``,
then an update to ``max_msgs_per_subject`` 2 and ``max_msgs`` ``KEEP``. ``place``: each
message on a subject of its own, then the creation of a ``last_per_subject`` consumer
``l`` on ``d.*`` (its placing walk in slices; no ``meta`` record: ``SWEEPING`` once a job
submitted after it has committed). ``pending``: consumer ``p`` with every message
pending, then its deletion (its pending entries swept apart: a ``meta`` sweep record).
Then it waits; the parent kills it with SIGKILL on ``SWEEPING``.
"""

from __future__ import annotations

import sys
import time

from store import (
    ConsumerConfig,
    CreateConsumer,
    CreateStream,
    DeleteConsumer,
    DeleteStream,
    Publish,
    Pull,
    PurgeStream,
    Store,
    StreamConfig,
    Tick,
    keys,
)
from store.env import Env

N = 20_000
KEEP = 50


def _recorded(env: Env, prefix: bytes) -> bool:
    """Is there a ``meta`` record whose key starts with ``prefix``?"""
    with env.read() as txn:
        cur = txn.cursor(db=env.dbs[keys.DB_META])
        return cur.set_range(prefix) and bytes(cur.key()).startswith(prefix)


def main(path: str, mode: str) -> None:
    store = Store.open(path, remove_slice=5)
    cfg = {"name": "D", "subjects": ["d.>"], "duplicate_window": 60_000_000_000}
    if mode == "consumer":
        cfg["retention"] = "interest"
    store.create_stream(cfg)
    if mode == "consumer":
        for c in "ab":
            store.create_consumer(
                "D", {"durable_name": c, "filter_subject": f"d.{c}", "ack_policy": "explicit"}
            )
    for start in range(0, N, 2000):
        ops = [
            Publish(
                f"d.{'ab'[i % 2]}"
                if mode == "consumer"
                else f"d.{i}"
                if mode == "place"
                else f"d.{i % 50}",
                b"x" * 40,
                (("Nats-Msg-Id", f"m{i}"),) if i % 10 else (),
            )
            for i in range(start, start + 2000)
        ]
        store.submit(ops).result(timeout=60)
    env = store.env
    with env.read() as txn:
        raw = txn.get(b"D", db=env.dbs[keys.DB_STREAMS])
        sid = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)[0]
    print(f"SID {sid}", flush=True)
    if mode == "place":
        lps = {"durable_name": "l", "deliver_policy": "last_per_subject", "filter_subject": "d.*"}
        done = store.submit([CreateConsumer("D", ConsumerConfig.from_wire(lps))])
        store.submit([Tick()]).result(timeout=60)  # commits before the walk's next slice
        if done.done():
            print("FINISHED TOO SOON", flush=True)
            return
        print("SWEEPING", flush=True)
        done.result(timeout=120)
        print("FINISHED", flush=True)
        return
    if mode == "pending":
        store.create_consumer(
            "D", {"durable_name": "p", "ack_policy": "explicit", "max_ack_pending": -1}
        )
        store.submit([Pull("D", "p", "inbox", batch=N)]).result(timeout=60)
        while store.consumer_info("D", "p").num_ack_pending < N:
            store.tick().result(timeout=60)
        done = store.submit([DeleteConsumer("D", "p")])
        marker = keys.META_SWEEP_PREFIX
    elif mode == "consumer":
        done = store.submit([DeleteConsumer("D", "b")])
        marker = keys.recheck_key(sid)
    elif mode == "purge":
        done = store.submit([PurgeStream("D", filter="d.*", keep=KEEP)])
        marker = keys.purge_prefix(sid)
    elif mode == "trim":
        cfg["max_msgs_per_subject"] = 2
        cfg["max_msgs"] = KEEP
        done = store.submit([CreateStream(StreamConfig.from_wire(cfg), update=True)])
        marker = keys.trim_key(sid)
    else:
        done = store.submit([DeleteStream("D")])
        marker = keys.sweep_key(sid)
    while not _recorded(env, marker):
        if done.done() and mode != "pending":  # (answered at once; its sweep goes on)
            print("FINISHED TOO SOON", flush=True)
            return
        time.sleep(0.001)
    if mode == "pending":
        # The sweep record is written before the first slice of the sweep: a job submitted
        # now commits with that slice or in the batch after it (store.writer), so the parent
        # kills a sweep that has swept something (it asserts so).
        store.submit([Tick()]).result(timeout=60)
    print("SWEEPING", flush=True)
    done.result(timeout=120)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "stream")

"""Child process for the interrupted-deletion tests: long work in small slices, killed.

Usage: ``python -m tests.store.sweep_child <dir> [stream|consumer|purge|trim]``.
``stream``: stores ``N`` messages in stream ``D`` on ``d.0`` … ``d.49``, prints
``SID <sid>``, submits the stream's deletion with ``remove_slice=5`` and prints
``SWEEPING`` once the first slice is committed (the stream is gone, its data is not).
``consumer``: stream ``D`` has interest retention and consumers ``a`` (on ``d.a``) and
``b`` (on ``d.b``); the deletion of ``b`` is submitted and ``SWEEPING`` printed once its
first slice of checks is committed (its ``meta`` recheck record written). ``purge``: as
``stream``, then a purge of ``d.*`` keeping the newest ``KEEP``. ``trim``: as ``stream``,
then an update to ``max_msgs_per_subject`` 2 and ``max_msgs`` ``KEEP``. Then it waits;
the parent kills it with SIGKILL on ``SWEEPING``.
"""

from __future__ import annotations

import sys
import time

from store import (
    CreateStream,
    DeleteConsumer,
    DeleteStream,
    Publish,
    PurgeStream,
    Store,
    StreamConfig,
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
                f"d.{'ab'[i % 2]}" if mode == "consumer" else f"d.{i % 50}",
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
    if mode == "consumer":
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
        if done.done():
            print("FINISHED TOO SOON", flush=True)
            return
        time.sleep(0.001)
    print("SWEEPING", flush=True)
    done.result(timeout=120)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "stream")

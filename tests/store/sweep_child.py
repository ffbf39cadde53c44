"""Child process for the interrupted-deletion tests: long work in small slices, killed.

Usage: ``python -m tests.store.sweep_child <dir> [stream|consumer]``. ``stream``: stores
``N`` messages in stream ``D``, prints ``SID <sid>``, submits the stream's deletion with
``remove_slice=5`` and prints ``SWEEPING`` once the first slice is committed (the stream is
gone, its data is not). ``consumer``: stream ``D`` has interest retention and consumers
``a`` (on ``d.a``) and ``b`` (on ``d.b``); the deletion of ``b`` is submitted and
``SWEEPING`` printed once its first slice of checks is committed (its ``meta`` recheck
record written). Then it waits; the parent kills it with SIGKILL on ``SWEEPING``.
"""

from __future__ import annotations

import sys
import time

from store import DeleteConsumer, DeleteStream, Publish, Store, keys

N = 20_000


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
    else:
        done = store.submit([DeleteStream("D")])
        marker = keys.sweep_key(sid)
    while True:
        with env.read() as txn:
            if txn.get(marker, db=env.dbs[keys.DB_META]) is not None:
                break
        if done.done():
            print("FINISHED TOO SOON", flush=True)
            return
        time.sleep(0.001)
    print("SWEEPING", flush=True)
    done.result(timeout=120)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "stream")

"""Child process for the interrupted-deletion test: deletes a big stream in small slices.

Usage: ``python -m tests.store.sweep_child <dir>``. Stores ``N`` messages in stream ``D``,
prints ``SID <sid>``, submits its deletion with ``remove_slice=5`` and prints ``SWEEPING``
once the first slice is committed (the stream is gone, its data is not); then waits for
the deletion. The parent kills it with SIGKILL on ``SWEEPING``.
"""

from __future__ import annotations

import sys
import time

from store import DeleteStream, Publish, Store, keys

N = 20_000


def main(path: str) -> None:
    store = Store.open(path, remove_slice=5)
    store.create_stream({"name": "D", "subjects": ["d.>"], "duplicate_window": 60_000_000_000})
    for start in range(0, N, 2000):
        ops = [
            Publish(f"d.{i % 50}", b"x" * 40, (("Nats-Msg-Id", f"m{i}"),) if i % 10 else ())
            for i in range(start, start + 2000)
        ]
        store.submit(ops).result(timeout=60)
    env = store.env
    with env.read() as txn:
        raw = txn.get(b"D", db=env.dbs[keys.DB_STREAMS])
        sid = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)[0]
    print(f"SID {sid}", flush=True)
    done = store.submit([DeleteStream("D")])
    while True:
        with env.read() as txn:
            if txn.get(keys.sweep_key(sid), db=env.dbs[keys.DB_META]) is not None:
                break
        if done.done():
            print("FINISHED TOO SOON", flush=True)
            return
        time.sleep(0.001)
    print("SWEEPING", flush=True)
    done.result(timeout=120)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

"""Child process for the crash test: appends (and acks) in a loop, reporting each commit.

Usage: ``python -m tests.store.crash_child <dir>``. Prints ``READY`` once open, then one
line ``P <seq> <thread> <n>`` per publish whose commit completed (so it is durable). The
parent kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Sequence

from store import Ack, Delivery, Event, JetStreamError, Op, PubAck, Publish, Pull, Store

THREADS = 4


def payload(tid: int, n: int) -> bytes:
    return f"{tid}:{n}:".encode() * (1 + n % 7)


def main(path: str) -> None:
    out_lock = threading.Lock()
    store = Store.open(path)

    def on_event(events: Sequence[Event]) -> None:
        acks = [Ack("C", "k", e.msg.seq) for e in events if isinstance(e, Delivery)]
        if acks:
            store.submit(acks)

    store.set_event_hook(on_event)
    with contextlib.suppress(JetStreamError):
        store.create_stream({"name": "C", "subjects": ["c.>"]})
    if "k" not in store.consumer_names("C"):
        store.create_consumer("C", {"durable_name": "k", "ack_policy": "explicit"})
    print("READY", flush=True)

    def worker(tid: int) -> None:
        n = 0
        while True:
            n += 1
            ops: list[Op] = [Publish(f"c.{tid}", payload(tid, n))]
            if n % 5 == 0:
                ops.append(Pull("C", "k", f"inbox.{tid}", batch=3))
            res = store.submit(ops).result()
            ack = res[0]
            if isinstance(ack, PubAck):
                with out_lock:
                    sys.stdout.write(f"P {ack.seq} {tid} {n}\n")
                    sys.stdout.flush()

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(sys.argv[1])

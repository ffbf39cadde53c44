"""Child process for the crash test: appends (and acks) in a loop, reporting each commit.

Usage: ``python -m tests.store.crash_child <dir> <report file>``. Prints ``READY`` once
open, then appends one line ``P <seq> <thread> <n>`` to the report file per publish whose
commit completed (so it is durable). The parent kills it with SIGKILL at a random moment.

The reports go to a file, not to stdout: a pipe nobody reads fills (64 KiB, about a second
of commits on a fast disk) and the child would block on it, idle when the kill lands. A
file never blocks, and what was written to it survives the SIGKILL (it is in the kernel's
page cache); each line is one ``write``, so at most the last one can be cut short.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence

from store import Ack, Delivery, Event, JetStreamError, Op, PubAck, Publish, Pull, Store

THREADS = 4


def payload(tid: int, n: int) -> bytes:
    return f"{tid}:{n}:".encode() * (1 + n % 7)


def main(path: str, report: str) -> None:
    out_lock = threading.Lock()
    out = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
                    os.write(out, f"P {ack.seq} {tid} {n}\n".encode())

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

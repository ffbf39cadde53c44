"""A broker-like writer in its own process (LMDB refuses a second open of one environment
in one process): ``python -m tests.pipeline.writer_child DATA_DIR STREAM SUBJECT BATCH
LIMIT [NEW_STREAM]`` appends batches of ``BATCH`` 100-byte messages on ``SUBJECT`` as fast
as the store commits them, until stdin closes or ``LIMIT`` messages are stored; after the
third batch it creates ``NEW_STREAM`` (subjects ``new.>``) holding 10 messages. Prints
``ready`` once the store is open, ``busy`` after the first commit, ``done N`` at the end."""

from __future__ import annotations

import os
import sys
import threading

from store import Publish, Store


def main(argv: list[str]) -> int:
    path, stream, subject = argv[0], argv[1], argv[2]
    batch, limit = int(argv[3]), int(argv[4])
    new_stream = argv[5] if len(argv) > 5 else None
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    n = 0
    with Store.open(path, sync="batch") as st:
        print("ready", flush=True)
        while not stop.is_set() and n < limit:
            ops = [Publish(subject, os.urandom(50).hex().encode(), (), stream)] * batch
            st.submit(ops).result(timeout=60)
            n += batch
            if n == batch:
                print("busy", flush=True)
            if new_stream is not None and n == 3 * batch:
                st.create_stream({"name": new_stream, "subjects": ["new.>"]})
                st.submit([Publish("new.m", b"n", (), new_stream)] * 10).result(timeout=60)
    print(f"done {n}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

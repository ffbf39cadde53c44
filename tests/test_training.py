"""The training run of the profile-guided build (hotpath/train.py): it drives a real broker
of this tree through every step and stops it cleanly, and it fails on a peer that does
not answer as a broker (so a build never trains on error paths without saying so)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hotpath import train


@pytest.mark.timeout(180)
def test_the_training_drives_a_broker_through_every_step_and_stops_it_cleanly() -> None:
    # (train.broker raises unless the broker exits 0 on SIGINT; every step checks replies)
    with train.broker() as port:
        train.drive(port)


@contextmanager
def _peer(answer: bytes) -> Iterator[int]:
    """A listener that answers the first connection (the training's first CONNECT) with
    ``answer`` and closes it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(timeout=10)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"", "closed a connection"),
        (b"\x20\x03\x00\x87\x00", "refused"),  # CONNACK 0x87 Not authorized
    ],
)
def test_a_peer_that_is_no_broker_fails_the_training(answer: bytes, error: str) -> None:
    with _peer(answer) as port, pytest.raises(train.TrainingError, match=error):
        train.drive(port)

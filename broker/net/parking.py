"""Parking: connected clients that have sent nothing since their CONNECT, without a task.

A trio task per connection costs about 40 µs to start and to wait for its first read
(measured under a connection storm: the broker's CPU per connect fell from ≈115 µs to
≈75 µs without it). Most clients send nothing right after CONNACK, so a connection
whose CONNECT the accept loop answered (``ClientConnection.connect_now``) is *parked*:
its socket goes into one epoll set watched by one task, with its keep-alive deadline
in a heap. When the socket becomes readable (data or EOF), when its keep-alive
deadline passes, or when the broker must close it (takeover, shutdown, a failed
send), the connection is unparked: its own task starts and carries on as if it had
been waiting on the socket all along. Output to a parked connection needs no task (it
is sent directly, or by a writer task started on demand).

Idle clients keep alive with PINGREQ: a readable parked socket that holds exactly one
PINGREQ is answered by the watcher (``Parkable.answer_idle``), which keeps the
connection parked with its deadline moved on (``extend``), and a connection whose task
reads a chunk that is only a PINGREQ, with nothing in progress, parks again. So a
client that only keeps alive costs a share of one watcher round (PINGREQs gather for
``IDLE_GATHER_SECONDS`` between rounds) and three syscalls per keep-alive period, with
no task (measured: ``scripts/bench_idle.py``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import select
from collections.abc import Callable
from typing import Protocol

import trio

log = logging.getLogger("jetmq.parking")

# After a round of answered PINGREQs the watcher waits this long before it looks again,
# so one wake-up of the trio loop serves the PINGREQs of that time (10,000 clients with
# a 20 s keep alive: 500 a second, about 12 a round) instead of one each. A timed wait
# costs trio a cancellation (≈ 200 µs of CPU here, measured): at 10 ms the rounds were
# a third of the idle broker's CPU (4.4 % of a core vs 3.15 % at 25 ms, bench_idle.py).
IDLE_GATHER_SECONDS = 0.025


class Parkable(Protocol):
    def unparked(self, expired: bool) -> None:
        """About to be served: the socket is readable, or (``expired``) keep alive ran out."""

    def answer_idle(self) -> bool:
        """The socket is readable: answer what it holds without a task if that is a lone
        PINGREQ (True; the connection calls ``extend``), else False (start the task)."""

    async def run(self) -> None:
        """The connection's own task."""

    def abandoned(self) -> None:
        """Closed without being served (the broker stops, or waking it failed): close at
        once, without a task."""


class Parking:
    """The parked connections of one broker, and the task that watches them."""

    def __init__(self, spawn: Callable[[Parkable], None]) -> None:
        self._spawn = spawn  # starts a connection's own task
        self._epoll = select.epoll()
        self._parked: dict[int, tuple[Parkable, int]] = {}  # socket fd -> (connection, tag)
        # (when, tag, fd): a heap of keep-alive deadlines. An entry is live while its fd is
        # parked under the same tag; entries of unparked connections are dropped lazily
        # (no reference to the connection is kept) and the heap is rebuilt when they
        # outnumber the live ones.
        self._deadlines: list[tuple[float, int, int]] = []
        self._tags = itertools.count(1)
        self._scope: trio.CancelScope | None = None  # the watcher's current wait
        self._last_round = -math.inf  # when the watcher last answered a PINGREQ
        self._closed = False

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, conn: Parkable, fd: int, deadline: float | None) -> bool:
        """Watch ``fd`` for ``conn``; False if it cannot be parked (start its task)."""
        if self._closed:
            return False
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except (OSError, ValueError):  # not a descriptor epoll can watch
            return False
        tag = next(self._tags)
        self._parked[fd] = (conn, tag)
        if deadline is not None:
            deadlines = self._deadlines
            if len(deadlines) > 2 * len(self._parked) + 64:
                deadlines[:] = [d for d in deadlines if self._live(d)]
                heapq.heapify(deadlines)
            heapq.heappush(deadlines, (deadline, tag, fd))
            scope = self._scope
            if scope is not None and deadline < scope.deadline:
                scope.deadline = deadline
        return True

    def extend(self, fd: int, deadline: float | None) -> None:
        """A parked connection heard from: its keep-alive deadline moves to ``deadline``."""
        parked = self._parked.get(fd)
        if parked is None or deadline is None:
            return
        tag = next(self._tags)  # the old deadline's entry is dead from now on
        self._parked[fd] = (parked[0], tag)
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self._parked) + 64:
            deadlines[:] = [d for d in deadlines if self._live(d)]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (deadline, tag, fd))

    def _live(self, entry: tuple[float, int, int]) -> bool:
        parked = self._parked.get(entry[2])
        return parked is not None and parked[1] == entry[1]

    def unpark(self, conn: Parkable, fd: int, *, expired: bool = False) -> bool:
        """Stop watching ``fd`` and start ``conn``'s task; False if it was not parked."""
        parked = self._parked.get(fd)
        if parked is None or parked[0] is not conn:
            return False
        del self._parked[fd]
        self._epoll.unregister(fd)
        conn.unparked(expired)
        self._spawn(conn)
        return True

    async def run(self) -> None:
        """The watcher task: one wait for every parked socket and deadline."""
        epoll = self._epoll
        deadlines = self._deadlines
        while True:
            while deadlines and not self._live(deadlines[0]):
                heapq.heappop(deadlines)  # unparked meanwhile
            # One cancel scope per deadline that passes, not per wake-up: an idle broker's
            # wake-ups are mostly a PINGREQ each, answered below.
            with trio.CancelScope(deadline=deadlines[0][0] if deadlines else math.inf) as scope:
                self._scope = scope
                while True:
                    await trio.lowlevel.wait_readable(epoll)
                    if not self._serve_ready():
                        continue
                    now = trio.current_time()
                    gap, self._last_round = now - self._last_round, now
                    if gap >= IDLE_GATHER_SECONDS:
                        continue  # slow keep-alive traffic: served as it comes
                    # PINGREQs come faster than one round per IDLE_GATHER_SECONDS: let
                    # them gather and serve what is ready without waiting on the epoll set
                    # again (one wake-up of the trio loop for several; a parked client's
                    # other packets wait at most this long, once), until a round finds
                    # no PINGREQ. Slower traffic would pay the timed wait for nothing.
                    while True:
                        await trio.sleep(IDLE_GATHER_SECONDS)
                        if not self._serve_ready():
                            break
                    self._last_round = trio.current_time()
            self._scope = None
            now = trio.current_time()
            while deadlines and deadlines[0][0] <= now:
                entry = heapq.heappop(deadlines)
                if self._live(entry):
                    self._wake(self._parked[entry[2]][0], entry[2], expired=True)

    def _serve_ready(self) -> bool:
        """Serve the parked sockets that are readable; True if a PINGREQ was answered."""
        answered = False
        for fd, _events in self._epoll.poll(0):
            parked = self._parked.get(fd)
            if parked is not None:
                answered = self._readable(parked[0], fd) or answered
        return answered

    def _readable(self, conn: Parkable, fd: int) -> bool:
        """True when ``conn`` answered a PINGREQ and stays parked."""
        try:
            if conn.answer_idle():
                return True
        except Exception:
            log.exception("internal error while answering a parked connection; waking it")
        self._wake(conn, fd, expired=False)
        return False

    def _wake(self, conn: Parkable, fd: int, *, expired: bool) -> None:
        try:
            self.unpark(conn, fd, expired=expired)
        except Exception:
            # A bug while waking one connection must not stop the watcher (and with it
            # every parked connection): that connection is closed, the others go on.
            log.exception("internal error while waking a parked connection; closing it")
            try:
                conn.abandoned()
            except Exception:
                log.exception("internal error while closing a parked connection")

    def close(self) -> None:
        """After the broker stopped: nothing is watched any more. A graceful shutdown
        unparks every connection first; any left (the broker's nursery was simply
        cancelled) are closed here."""
        if self._closed:
            return
        self._closed = True
        left = [conn for conn, _tag in self._parked.values()]
        self._parked.clear()
        self._deadlines.clear()
        trio.lowlevel.notify_closing(self._epoll)
        self._epoll.close()
        for conn in left:
            conn.abandoned()

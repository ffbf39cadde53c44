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


class Parkable(Protocol):
    def unparked(self, expired: bool) -> None:
        """About to be served: the socket is readable, or (``expired``) keep alive ran out."""

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
            with trio.move_on_at(deadlines[0][0] if deadlines else math.inf) as scope:
                self._scope = scope
                await trio.lowlevel.wait_readable(epoll)
            self._scope = None
            for fd, _events in epoll.poll(0):
                parked = self._parked.get(fd)
                if parked is not None:
                    self._wake(parked[0], fd, expired=False)
            now = trio.current_time()
            while deadlines and deadlines[0][0] <= now:
                entry = heapq.heappop(deadlines)
                if self._live(entry):
                    self._wake(self._parked[entry[2]][0], entry[2], expired=True)

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

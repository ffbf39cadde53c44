"""Parking: the connected clients served without a task of their own.

A trio task per connection costs a wake-up per packet read (epoll, reschedule, the task's
step, re-arming its socket, moving its keep-alive deadline: ≈ 35-45 µs on this machine
kind), and about 40 µs to start. So a plain-TCP connection, once connected, is *parked*:
its socket is in one epoll set watched by one task, its keep-alive deadline in a heap.
When sockets become readable the watcher serves them in the order epoll reports them,
synchronously: it reads what each holds and hands it to the connection
(``Parkable.serve``), which decodes and handles the packets (a PUBLISH is routed, its
acknowledgement sent or queued behind its commit) exactly as its own task would; their
output is written at the end of each connection's chunk. One wake-up of the trio loop
serves every socket that is ready, and every PUBLISH read in one round joins one store
batch (one commit).

A connection leaves the set (*unparked*: its own task starts and carries on as if it had
been waiting on the socket all along) only to close with a flush or a linger, when its
keep-alive deadline passes, when so many of its acknowledgements wait for commits that
reading must stop (``Output.congested``), or when a bug is met while serving it. A
connection whose task reads a chunk parks again. Output to a parked connection needs no
task (it is sent directly, or by a writer task started on demand).

Idle clients keep alive with PINGREQ: a chunk that is exactly one PINGREQ is answered
without the codec machine, and after a round that answered only PINGREQs, on a broker that
served no other packet for ``IDLE_QUIET_SECONDS``, the watcher waits
``IDLE_GATHER_SECONDS`` before it looks again, so one wake-up serves several PINGREQs
(measured: ``scripts/bench_idle.py``).

Keep-alive deadlines are looked at on a grid of ``DEADLINE_GRAIN_SECONDS``: the watcher's
wait ends at the first grid point at or after the earliest deadline, and that one wake-up
handles every deadline up to it. 10,000 clients keeping alive every 20 s move a deadline
past every 2 ms, and each wake-up of its own cost trio a cancellation; a client is told
its keep alive ran out at most a grain late (mosquitto looks once a second).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import select
from collections.abc import Callable
from typing import Final, Protocol

import trio

from broker.net.idlewait import IdleWait, run_clock

log = logging.getLogger("jetmq.parking")

# After a round of answered PINGREQs the watcher waits this long before it looks again,
# so one round serves the PINGREQs of that time (10,000 clients with a 20 s keep alive:
# 500 a second, about 12 a round) instead of one each. The wait is a pause in place
# (IdleWait.pause: a poll) while trio has nothing to do, else a trio sleep, which costs a
# cancellation (≈ 200 µs of CPU here: at 10 ms such rounds were a third of the idle
# broker's CPU, bench_idle.py). It is also how long a packet may wait on an idle broker.
IDLE_GATHER_SECONDS: Final = 0.025
# Keep-alive and connect-timeout deadlines are acted on at the next multiple of this: one
# wake-up for all that pass within it (10,000 idle clients: 0.73x the CPU, bench_idle.py).
DEADLINE_GRAIN_SECONDS: Final = 0.25


def _on_grain(deadline: float) -> float:
    """The first multiple of ``DEADLINE_GRAIN_SECONDS`` at or after ``deadline``."""
    return math.ceil(deadline / DEADLINE_GRAIN_SECONDS) * DEADLINE_GRAIN_SECONDS


class Parkable(Protocol):
    def unparked(self, expired: bool) -> None:
        """About to get its own task: to close, keep alive ran out (``expired``), or its
        reading must wait."""

    def serve(self, now: float) -> int:
        """The socket is readable: read and handle what it holds. ``SERVED`` (still
        parked), ``PINGED`` (it held a lone PINGREQ, answered; still parked) or ``LEFT``
        (it unparked itself, or closed)."""

    def deadline(self) -> float | None:
        """The current keep-alive deadline (from the last complete packet), None: none."""

    async def run(self) -> None:
        """The connection's own task."""

    def abandoned(self) -> None:
        """Closed without being served (the broker stops, or serving it failed): close at
        once, without a task."""


LEFT: Final = 0
SERVED: Final = 1
PINGED: Final = 2

# Sockets served per round at most before the watcher lets other tasks run (writers,
# commit callbacks, timers): a round of 10,000 ready sockets would hold the loop for a second.
ROUND_EVENTS: Final = 512
# The watcher gathers PINGREQs only on a broker that served nothing else for this long:
# a packet that arrives during a gathering wait waits for it.
IDLE_QUIET_SECONDS: Final = 1.0
# The watcher waits for its next round in place (broker.net.idlewait) after rounds of at
# most this many ready sockets.
IN_PLACE_ROUND: Final = 2


class Parking:
    """The parked connections of one broker, and the task that watches and serves them."""

    def __init__(
        self,
        spawn: Callable[[Parkable], None],
        begin_round: Callable[[], None],
        end_round: Callable[[], None],
    ) -> None:
        self._spawn = spawn  # starts a connection's own task
        # A round's output is gathered and written at its end, one write per connection,
        # and its store writes are one batch, submitted at its end.
        self._begin_round = begin_round
        self._end_round = end_round
        self._epoll = select.epoll()
        self._parked: dict[int, tuple[Parkable, int]] = {}  # socket fd -> (connection, tag)
        # Descriptors that are not connections, served in the rounds: fd -> (serve, stop).
        self._sources: dict[int, tuple[Callable[[], None], Callable[[], None]]] = {}
        # (when, tag, fd): a heap of keep-alive deadlines, at most one live entry per
        # parked connection. An entry is live while its fd is parked under the same tag;
        # entries of unparked connections are dropped lazily (no reference to the
        # connection is kept). A live entry that comes due asks its connection for the
        # current deadline (moved by every complete packet) and is pushed again if it
        # moved: nothing is done per packet but the connection noting the time.
        self._deadlines: list[tuple[float, int, int]] = []
        self._tags = itertools.count(1)
        self._scope: trio.CancelScope | None = None  # the watcher's current wait
        self._last_round = -math.inf  # when the watcher last answered a PINGREQ
        self._last_data = -math.inf  # when it last served anything else
        self._closed = False
        # Waits for the next round without a trip through trio's loop (None: trio's way).
        self.in_place: IdleWait | None = None
        self._round_size = 0  # sockets ready in the last round
        # The run's clock, read directly once the watcher runs (trio.current_time is two
        # calls more per round).
        self._now: Callable[[], float] = trio.current_time

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, conn: Parkable, fd: int, deadline: float | None) -> bool:
        """Watch and serve ``fd`` for ``conn``; False if it cannot be parked (it keeps
        its task)."""
        if self._closed:
            return False
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except (OSError, ValueError):  # not a descriptor epoll can watch
            return False
        tag = next(self._tags)
        self._parked[fd] = (conn, tag)
        if deadline is not None:
            self._push(deadline, tag, fd)
        return True

    def watch_source(self, fd: int, serve: Callable[[], None], stop: Callable[[], None]) -> None:
        """Serve ``fd`` (not a connection: the store's commit outcomes) in the rounds:
        ``serve()`` when it is readable, its output written with the round's; ``stop()``
        when the watcher closes. ``serve`` must read what makes ``fd`` readable."""
        self._epoll.register(fd, select.EPOLLIN)
        self._sources[fd] = (serve, stop)

    def reschedule(self, fd: int, deadline: float | None) -> None:
        """A parked connection's deadline changed other than by a packet heard (its
        CONNECT came: keep alive replaces the connect timeout): the old entry is dead."""
        parked = self._parked.get(fd)
        if parked is None:
            return
        tag = next(self._tags)
        self._parked[fd] = (parked[0], tag)
        if deadline is not None:
            self._push(deadline, tag, fd)

    def _push(self, deadline: float, tag: int, fd: int) -> None:
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self._parked) + 64:
            deadlines[:] = [d for d in deadlines if self._live(d)]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (deadline, tag, fd))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:  # (the scope's is on the grid)
            scope.deadline = _on_grain(deadline)

    def _live(self, entry: tuple[float, int, int]) -> bool:
        parked = self._parked.get(entry[2])
        return parked is not None and parked[1] == entry[1]

    def unpark(self, conn: Parkable, fd: int, *, expired: bool = False) -> bool:
        """Stop watching ``fd`` and start ``conn``'s task; False if it was not parked."""
        if not self.forget(conn, fd):
            return False
        conn.unparked(expired)
        self._spawn(conn)
        return True

    def forget(self, conn: Parkable, fd: int) -> bool:
        """Stop watching ``fd`` (its connection closes without a task); False if it was
        not parked."""
        parked = self._parked.get(fd)
        if parked is None or parked[0] is not conn:
            return False
        del self._parked[fd]
        self._epoll.unregister(fd)
        return True

    async def run(self) -> None:
        """The watcher task: one wait for every parked socket and deadline."""
        self._now = run_clock()
        idle = self.in_place = IdleWait.open(self._epoll.fileno())
        try:
            await self._watch(idle)
        finally:
            if idle is not None:
                idle.close()

    async def _watch(self, idle: IdleWait | None) -> None:
        epoll = self._epoll
        deadlines = self._deadlines
        while True:
            while deadlines and not self._live(deadlines[0]):
                heapq.heappop(deadlines)  # unparked meanwhile
            # One cancel scope per grain in which deadlines pass, not per wake-up.
            first = _on_grain(deadlines[0][0]) if deadlines else math.inf
            with trio.CancelScope(deadline=first) as scope:
                self._scope = scope
                while True:
                    await trio.lowlevel.wait_readable(epoll)
                    pinged = self._serve_ready()
                    # While no other task can run, the next round is waited for here, after
                    # rounds of a socket or two (low rates: a trip through trio's loop costs
                    # more than the round). Busier rounds go through trio's loop, which lets
                    # the next round gather more (one write per connection per round).
                    while (
                        not pinged
                        and self._round_size <= IN_PLACE_ROUND
                        and idle is not None
                        and idle.wait()
                    ):
                        pinged = self._serve_ready()
                    if not pinged:
                        continue
                    now = trio.current_time()
                    gap, self._last_round = now - self._last_round, now
                    if gap >= IDLE_GATHER_SECONDS or now - self._last_data < IDLE_QUIET_SECONDS:
                        continue  # slow keep-alive traffic, or a busy broker: served as it comes
                    # PINGREQs come faster than one round per IDLE_GATHER_SECONDS on a broker
                    # that does nothing else: let them gather and serve what is ready without
                    # waiting on the epoll set again (one wake-up of the trio loop for several;
                    # a packet arriving meanwhile waits at most this long), until a round
                    # finds no PINGREQ or something else.
                    while True:
                        # In place while trio has nothing to do: a trio sleep is a
                        # cancellation, each time.
                        left = (
                            IDLE_GATHER_SECONDS if idle is None else idle.pause(IDLE_GATHER_SECONDS)
                        )
                        if left is not None:
                            await trio.sleep(left)  # (0: a checkpoint, trio's turn)
                        if not self._serve_ready():
                            break
                    self._last_round = trio.current_time()
            self._scope = None
            now = trio.current_time()
            while deadlines and deadlines[0][0] <= now:
                entry = heapq.heappop(deadlines)
                if not self._live(entry):
                    continue
                conn = self._parked[entry[2]][0]
                deadline = conn.deadline()
                if deadline is not None and deadline > now:
                    heapq.heappush(deadlines, (deadline, entry[1], entry[2]))
                else:
                    self._wake(conn, entry[2], expired=True)

    def _serve_ready(self) -> bool:
        """Serve the parked sockets that are readable; True if the round answered
        PINGREQs and nothing else."""
        ready = self._epoll.poll(0, ROUND_EVENTS)
        self._round_size = len(ready)
        if not ready:
            return False
        pinged = served = False
        now = self._now()
        self._begin_round()
        try:
            for fd, _events in ready:
                parked = self._parked.get(fd)
                if parked is None:
                    source = self._sources.get(fd)
                    if source is not None:
                        source[0]()  # (logs its own errors)
                        served = True
                    continue  # else it left earlier in this round
                conn = parked[0]
                try:
                    code = conn.serve(now)
                except Exception:
                    log.exception("internal error while serving a parked connection; waking it")
                    self._wake(conn, fd, expired=False)
                    served = True
                    continue
                if code == PINGED:
                    pinged = True
                else:
                    served = True
        finally:
            self._end_round()
        if served:
            self._last_data = now
        return pinged and not served

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
        sources = list(self._sources.values())
        self._sources.clear()
        for _serve, stop in sources:
            stop()
        self._deadlines.clear()
        trio.lowlevel.notify_closing(self._epoll)
        self._epoll.close()
        for conn in left:
            conn.abandoned()

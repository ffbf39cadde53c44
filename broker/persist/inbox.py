"""Commit outcomes handed from the store's writer thread to the trio thread by a
descriptor that the parking watcher serves in its rounds.

``TrioToken.run_sync_soon`` wakes trio's loop through its wake-up socket; the callback then
runs in a system task, and what it sends goes out in a write of its own. An outcome put in
a :class:`CommitInbox` instead makes its eventfd readable; that descriptor sits in the
parking watcher's epoll set beside the parked sockets, so the watcher runs the outcome in
its round (``Parking.watch_source``): no trip through trio's run queue, and the
acknowledgements and deliveries it releases leave in the round's writes, one per
connection. At low rates a persistent message is one commit, so one such hand-off each.

Threads
    :meth:`CommitInbox.put` on the writer thread (or any thread); :meth:`run` and
    :meth:`stop` on the trio thread. The deque and the flag are read and written under
    the GIL; an item is popped exactly once.

Resource handling
    :meth:`stop` (the watcher stopped serving it) sends what is queued, and what is put
    from then on, through ``run_sync_soon``: none is lost, whichever thread drains them.
    :meth:`release` closes the eventfd once no thread can put any more (the store's
    writer joined): closed earlier, its number could be reused and written to.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import trio

log = logging.getLogger("jetmq.persist")


class CommitInbox:
    """Callbacks queued from other threads, run on the trio thread when the descriptor
    :attr:`fd` is served (:meth:`run`)."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._token = token
        self._items: collections.deque[tuple[Callable[[Any], None], Any]] = collections.deque()
        # Set by the thread that writes the eventfd, cleared by run() before it drains the
        # queue: an item put while it is set is drained by the run under way.
        self._signalled = False
        self._stopped = False

    def put(self, fn: Callable[[Any], None], arg: Any) -> None:
        """(any thread) Run ``fn(arg)`` on the trio thread, in the order put."""
        self._items.append((fn, arg))
        if self._stopped:
            self._drain_to_loop()
        elif not self._signalled:
            self._signalled = True
            os.eventfd_write(self.fd, 1)

    def run(self) -> None:
        """(trio thread) Run what is queued; a callback that raises is logged and the
        others still run."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.fd)
        self._signalled = False
        items = self._items
        while items:
            fn, arg = items.popleft()
            try:
                fn(arg)
            except Exception:
                log.exception("internal error in a store commit's completion")

    def stop(self) -> None:
        """(trio thread) Nothing serves the descriptor any more: what is queued, and what is
        put from now on, goes through ``run_sync_soon``."""
        self._stopped = True
        self._drain_to_loop()

    def release(self) -> None:
        """Close the descriptor; only once nothing can :meth:`put` any more."""
        self.stop()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _drain_to_loop(self) -> None:
        items = self._items
        while items:
            try:
                fn, arg = items.popleft()
            except IndexError:  # the other thread took the last one
                return
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(fn, arg)

"""Bugs met while serving clients, reported without flooding the log."""

from __future__ import annotations

import logging
import math
import sys
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from broker.net.link import Link

log = logging.getLogger("jetmq.client")


class InternalErrors:
    """A bug met while serving clients: logged with its traceback the first time in
    ``TRACEBACK_EVERY`` seconds, one line (client id, the error) otherwise. Any client can
    trigger a bug over and over: 500 connections once wrote 1 MB of tracebacks in 0.9 s."""

    TRACEBACK_EVERY = 60.0

    def __init__(self) -> None:
        self._last_traceback = -math.inf
        self.count = 0

    def report(self, conn: Link) -> None:
        self.count += 1
        session = conn.session
        client_id = session.client_id if session is not None else "-"
        now = trio.current_time()
        if now - self._last_traceback >= self.TRACEBACK_EVERY:
            self._last_traceback = now
            log.exception(
                "internal error while serving client %r; closing its connection", client_id
            )
        else:
            exc = sys.exc_info()[1]
            log.error(
                "internal error while serving client %r (%d so far): %r; closing its connection",
                client_id,
                self.count,
                exc,
            )


internal_errors = InternalErrors()

"""What the bridge is doing, as one object other code reads (the metrics exporter, tests,
``$SYS``): connected or not, in flight, pending, last error, counters.

Written on the trio thread only (the asyncio thread hands its news over with
``TrioToken.run_sync_soon``), so readers on the trio thread need no lock. One log line
per state change (connected, disconnected, a new last error), never one per message; bad
input is counted per message and logged at most once per ``BAD_INPUT_LOG_S`` per kind,
with the count.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("jetmq.bridge")

BAD_INPUT_LOG_S = 10.0

COUNTERS = (
    "forwarded",  # core publishes handed to NATS
    "forward_dropped",  # core: the bounded queue to NATS was full, or NATS refused to buffer
    "forward_bad_topic",  # topics that cannot become a subject (whitespace, '*', '>')
    "captured",  # jetstream: messages stored in the outbox before their PUBACK
    "js_published",  # jetstream: PubAcks received (new)
    "js_duplicates",  # jetstream: PubAcks with duplicate = true (a resend after a loss)
    "js_retries",  # jetstream: publishes that failed (timeout, no stream, disconnect)
    "imported",  # NATS messages published into the broker
    "import_own",  # our own messages come back (Mqtt-Origin = name): dropped
    "import_bad_subject",  # subjects that cannot become a topic
    "import_bad_headers",  # Mqtt-* headers that do not parse
    "import_nak_overload",  # jetstream imports refused with a delayed nak: broker busy
    "import_failed",  # stored but the commit failed: nak (jetstream) or lost (core)
    "import_dropped",  # core imports NATS dropped for us (slow consumer)
    "connects",  # successful connections (the first and every reconnect)
    "connect_failures",  # failed connection attempts
)


@dataclass
class BridgeState:
    name: str
    connected: bool = False
    server: str = ""  # the NATS server we are connected to
    last_error: str = ""
    in_flight: int = 0  # jetstream publishes awaiting their PubAck
    pending: int = 0  # outbox messages not yet acknowledged by NATS (includes in flight)
    forward_queue: int = 0  # core messages waiting for the NATS thread
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    _logged: dict[str, float] = field(default_factory=dict)

    def set_connected(self, connected: bool, server: str = "") -> None:
        if connected == self.connected and server == self.server:
            return
        self.connected = connected
        self.server = server
        if connected:
            self.counters["connects"] += 1
            log.info("bridge %s: connected to %s", self.name, server)
        else:
            log.warning("bridge %s: disconnected from NATS", self.name)

    def closed(self) -> None:
        """The bridge stopped (broker shutdown): connection drained and closed."""
        self.connected = False
        self.server = ""
        log.info("bridge %s: stopped", self.name)

    def error(self, text: str) -> None:
        """A new last error (logged when it differs from the previous one)."""
        if text != self.last_error:
            self.last_error = text
            log.warning("bridge %s: %s", self.name, text)

    def bad_input(self, counter: str, text: str) -> None:
        """Count bad input; log it, at most once per ``BAD_INPUT_LOG_S`` per kind."""
        self.counters[counter] += 1
        now = time.monotonic()
        if now - self._logged.get(counter, -BAD_INPUT_LOG_S) >= BAD_INPUT_LOG_S:
            self._logged[counter] = now
            log.warning(
                "bridge %s: %s (%s: %d so far)", self.name, text, counter, self.counters[counter]
            )

    def snapshot(self) -> dict[str, object]:
        return {
            "name": self.name,
            "connected": self.connected,
            "server": self.server,
            "last_error": self.last_error,
            "in_flight": self.in_flight,
            "pending": self.pending,
            "forward_queue": self.forward_queue,
            **self.counters,
        }

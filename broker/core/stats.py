"""The broker's counters: plain integers bumped where the work happens, read by
``broker.ops`` ($SYS, /metrics, systemd STATUS) when it reports.

Hot paths pay one integer add (``stats.publish_received += 1``); nothing here formats,
allocates or calls a metrics library per message. Everything runs on the trio thread,
except :class:`Histogram` observations of store commits, made on the store's writer
thread (only that thread writes that histogram; readers may see it a commit late).
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (seconds) of the latency histograms: 0.5 ms .. 10 s, as Prometheus'
# defaults but finer at the low end (a commit with fsync takes 1-20 ms on a disk).
LATENCY_BOUNDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class Histogram:
    """Bucket counts of observations (not cumulative; the exporter adds them up): one
    ``bisect`` and two adds per observation."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BOUNDS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_zero(self) -> None:
        """An observation known to be (close to) zero, without reading a clock."""
        self.counts[0] += 1

    @property
    def count(self) -> int:
        return sum(self.counts)


class Stats:
    """Counters of one broker process (see module docstring). mosquitto's ``$SYS`` names
    are given where a counter feeds one."""

    __slots__ = (
        "bytes_received",
        "bytes_sent",
        "clients_connected",
        "clients_maximum",
        "connections_total",
        "control_sent",
        "packets_received",
        "publish_ack",
        "publish_bytes_received",
        "publish_dropped",
        "publish_received",
        "publish_sent",
    )

    def __init__(self) -> None:
        self.bytes_received = 0  # $SYS/broker/bytes/received: every byte read from clients
        self.bytes_sent = 0  # $SYS/broker/bytes/sent
        self.packets_received = 0  # $SYS/broker/messages/received: packets of any type
        # Packets sent other than PUBLISH (PUBLISH: publish_sent); their sum is
        # $SYS/broker/messages/sent (one add per packet instead of two on the fan-out path).
        self.control_sent = 0
        self.publish_received = 0  # $SYS/broker/publish/messages/received
        self.publish_bytes_received = 0  # $SYS/broker/publish/bytes/received (payloads)
        self.publish_sent = 0  # $SYS/broker/publish/messages/sent
        self.publish_dropped = 0  # $SYS/broker/publish/messages/dropped (slow QoS 0 client)
        self.clients_connected = 0  # $SYS/broker/clients/connected
        self.clients_maximum = 0  # $SYS/broker/clients/maximum
        self.connections_total = 0  # accepted CONNECTs ($SYS/broker/load/connections/*)
        # PUBLISH (QoS 1/2) read -> PUBACK/PUBREC queued: the store commit it waits for.
        self.publish_ack = Histogram()

    def connected(self) -> None:
        self.connections_total += 1
        n = self.clients_connected = self.clients_connected + 1
        if n > self.clients_maximum:
            self.clients_maximum = n

    def disconnected(self) -> None:
        self.clients_connected -= 1

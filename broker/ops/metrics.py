"""Prometheus exposition of the broker's counters through **prometheus-client**: one
custom collector reads the plain integers of ``broker.core.stats`` (and the store's) at
scrape time, so the hot paths never call the library. The histograms are bucket counts kept
by ``broker.core.stats.Histogram`` and handed over as ``HistogramMetricFamily``.

| metric | type | what |
|---|---|---|
| jetmq_clients_connected | gauge | clients connected now |
| jetmq_clients_maximum | gauge | most clients connected at once since start |
| jetmq_sessions | gauge | sessions (connected + persistent ones without a connection) |
| jetmq_subscriptions | gauge | subscriptions of every session |
| jetmq_retained_messages | gauge | retained messages |
| jetmq_connections_total | counter | CONNECTs accepted |
| jetmq_messages_received_total / _sent_total | counter | PUBLISH packets in / out |
| jetmq_messages_dropped_total | counter | QoS 0 copies dropped for a slow client |
| jetmq_packets_received_total / _sent_total | counter | MQTT packets of any type |
| jetmq_bytes_received_total / _sent_total | counter | bytes on client sockets |
| jetmq_publish_ack_seconds | histogram | QoS 1/2 PUBLISH read -> PUBACK/PUBREC queued |
| jetmq_store_commit_seconds | histogram | store batch submitted -> committed (fsynced) |
| jetmq_store_size_bytes, jetmq_store_map_size_bytes | gauge | LMDB data file, map |
| jetmq_store_map_used_percent | gauge | the data file's size over the map size (it grows on demand) |
| jetmq_store_streams | gauge | streams |
| jetmq_store_commits_total | counter | group commits |
| jetmq_uptime_seconds | gauge | seconds since start |
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from broker.core.stats import Histogram
from broker.ops import view

if TYPE_CHECKING:
    from broker.net.runtime import Broker

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

GAUGES = (
    ("jetmq_clients_connected", "clients_connected", "Clients connected now."),
    ("jetmq_clients_maximum", "clients_maximum", "Most clients connected at once since start."),
    ("jetmq_sessions", "clients_total", "Sessions, connected or not."),
    ("jetmq_subscriptions", "subscriptions", "Subscriptions of every session."),
    ("jetmq_retained_messages", "retained", "Retained messages."),
    ("jetmq_store_size_bytes", "store_size_bytes", "Size of the LMDB data file."),
    ("jetmq_store_map_size_bytes", "store_map_size_bytes", "LMDB map size."),
    ("jetmq_store_streams", "store_streams", "Streams in the store."),
    ("jetmq_store_map_used_percent", "store_map_used_percent", "Data file size / map size, %."),
    ("jetmq_jetstream_streams", "jetstream_streams", "JetStream user streams."),
    ("jetmq_jetstream_consumers", "jetstream_consumers", "Consumers of the user streams."),
    ("jetmq_bridge_connected", "bridge_connected", "Bridge: 1 while connected to NATS."),
    (
        "jetmq_bridge_in_flight",
        "bridge_in_flight",
        "Bridge: JetStream publishes awaiting a PubAck.",
    ),
    ("jetmq_bridge_pending", "bridge_pending", "Bridge: outbox messages not yet acknowledged."),
)
COUNTERS = (
    ("jetmq_connections", "connections_total", "CONNECTs accepted."),
    ("jetmq_messages_received", "publish_received", "PUBLISH packets received."),
    ("jetmq_messages_sent", "publish_sent", "PUBLISH packets sent."),
    ("jetmq_messages_dropped", "publish_dropped", "QoS 0 copies dropped for slow clients."),
    ("jetmq_packets_received", "packets_received", "MQTT packets received, any type."),
    ("jetmq_packets_sent", "packets_sent", "MQTT packets sent, any type."),
    ("jetmq_bytes_received", "bytes_received", "Bytes read from client sockets."),
    ("jetmq_bytes_sent", "bytes_sent", "Bytes written to client sockets."),
    ("jetmq_store_commits", "store_commits", "Store group commits."),
    ("jetmq_bridge_forwarded", "bridge_forwarded", "Bridge: core publishes handed to NATS."),
    ("jetmq_bridge_js_published", "bridge_js_published", "Bridge: JetStream PubAcks received."),
    ("jetmq_bridge_js_retries", "bridge_js_retries", "Bridge: JetStream publishes retried."),
    ("jetmq_bridge_imported", "bridge_imported", "Bridge: NATS messages published here."),
    ("jetmq_bridge_forward_dropped", "bridge_forward_dropped", "Bridge: core forwards dropped."),
    ("jetmq_bridge_connects", "bridge_connects", "Bridge: connections to NATS made."),
)


def histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
    """Our bucket counts as a Prometheus histogram (cumulative buckets, +Inf, sum)."""
    counts = list(hist.counts)  # one copy: the writer thread may add meanwhile
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip(hist.bounds, counts, strict=False):
        running += n
        buckets.append((repr(bound), running))
    running += counts[-1]
    buckets.append(("+Inf", running))
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=hist.total)


class BrokerCollector(Collector):
    """Reads the broker's figures when Prometheus scrapes (on the trio thread)."""

    def __init__(self, broker: Broker, started: float) -> None:
        self.broker = broker
        self.started = started

    def collect(self) -> Iterable[Metric]:
        values = view.counters(self.broker)
        for name, key, doc in GAUGES:
            yield GaugeMetricFamily(name, doc, value=values[key])
        for name, key, doc in COUNTERS:
            yield CounterMetricFamily(name, doc, value=values[key])
        yield GaugeMetricFamily(
            "jetmq_uptime_seconds", "Seconds since start.", value=time.monotonic() - self.started
        )
        yield histogram(
            "jetmq_publish_ack_seconds",
            "QoS 1/2 PUBLISH read to its PUBACK/PUBREC queued (zero when nothing is stored).",
            self.broker.stats.publish_ack,
        )
        yield histogram(
            "jetmq_store_commit_seconds",
            "Store batch submitted to committed (fsynced with storage.sync = always).",
            self.broker.store_client.commit_seconds,
        )


class Exporter:
    """The /metrics body of one broker."""

    def __init__(self, broker: Broker, started: float) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, started))

    def render(self) -> bytes:
        return generate_latest(self.registry)

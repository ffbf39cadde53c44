"""What the operations side reads of a running broker, in one place: the counters of
``broker.core.stats``, the sizes of the hub's maps, the store's metrics, and the tables of
the status page. Everything here runs on the trio thread except :func:`store_tables`, which
calls the store's synchronous helpers and is run in a worker thread.

Nothing here is on a per-message path: it is read when $SYS publishes (every
``[sys] interval``), when Prometheus scrapes, when the status page polls.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.net.runtime import Broker


def counters(broker: Broker) -> dict[str, int]:
    """Every integer the broker reports, by a stable name (``$SYS``, /metrics, /api/stats)."""
    stats = broker.stats
    hub = broker.hub
    sessions = len(hub.sessions)
    subscriptions = 0
    for session in hub.sessions:
        subscriptions += len(session.subscriptions)
    out = {
        "clients_connected": stats.clients_connected,
        "clients_maximum": stats.clients_maximum,
        "clients_total": sessions,
        "clients_disconnected": max(0, sessions - stats.clients_connected),
        "connections_total": stats.connections_total,
        "bytes_received": stats.bytes_received,
        "bytes_sent": stats.bytes_sent,
        "packets_received": stats.packets_received,
        "packets_sent": stats.control_sent + stats.publish_sent,
        "publish_received": stats.publish_received,
        "publish_sent": stats.publish_sent,
        "publish_dropped": stats.publish_dropped,
        "publish_bytes_received": stats.publish_bytes_received,
        "subscriptions": subscriptions,
        "retained": len(hub.retained),
    }
    out.update(store_metrics(broker))
    js = broker.jetstream
    out["jetstream_enabled"] = int(js is not None)
    out["jetstream_streams"] = js.streams if js is not None else 0
    out["jetstream_consumers"] = js.consumers if js is not None else 0
    out.update(bridge_metrics(broker))
    return out


def bridge_metrics(broker: Broker) -> dict[str, int]:
    """The NATS bridge's state (``broker.bridge.state``): connected, queues, counters;
    all zero without a ``[bridge]``."""
    from broker.bridge.state import COUNTERS

    bridge = broker.bridge
    out = {"bridge_connected": 0, "bridge_in_flight": 0, "bridge_pending": 0}
    out["bridge_forward_queue"] = 0
    out.update({f"bridge_{name}": 0 for name in COUNTERS})
    if bridge is None:
        return out
    state = bridge.status()
    out["bridge_connected"] = int(state.connected)
    out["bridge_in_flight"] = state.in_flight
    out["bridge_pending"] = state.pending
    out["bridge_forward_queue"] = state.forward_queue
    for name in COUNTERS:
        out[f"bridge_{name}"] = state.counters.get(name, 0)
    return out


def bridge_view(broker: Broker) -> dict[str, Any]:
    """``/api/bridge``: the NATS bridge's state for the status page (``configured`` false
    without a ``[bridge]``): connected, server, last error, queues and the counters."""
    bridge = broker.bridge
    if bridge is None:
        return {"configured": False}
    return {"configured": True, **bridge.status().snapshot()}


def store_metrics(broker: Broker) -> dict[str, int]:
    """The store's counters (``store.Store.metrics``) and its data file's size: LMDB's
    high-water mark of pages, what the map must hold (``store_map_used_percent``)."""
    st = broker.store_client.store
    m = st.metrics()
    try:
        size = os.stat(os.path.join(st.env.path, "data.mdb")).st_size
    except OSError:
        size = 0
    map_size = m.get("map_size", 0)
    return {
        "store_size_bytes": size,
        "store_map_size_bytes": map_size,
        "store_map_used_percent": math.ceil(100 * size / map_size) if map_size else 0,
        "store_streams": m.get("streams", 0),
        "store_commits": m.get("commits", 0),
        "store_ops_committed": m.get("ops_committed", 0),
        "store_map_growths": m.get("map_growths", 0),
    }


# Exponential moving averages of per-minute rates, as mosquitto's $SYS/broker/load/...
LOAD_WINDOWS = (("1min", 60.0), ("5min", 300.0), ("15min", 900.0))
LOADED = {
    "messages/received": "packets_received",
    "messages/sent": "packets_sent",
    "publish/received": "publish_received",
    "publish/sent": "publish_sent",
    "publish/dropped": "publish_dropped",
    "bytes/received": "bytes_received",
    "bytes/sent": "bytes_sent",
    "connections": "connections_total",
}


@dataclass
class Loads:
    """mosquitto's load figures: for each counter, a per-minute rate smoothed over 1, 5
    and 15 minutes (``load = load*e + rate*(1-e)``, ``e = exp(-dt/window)``)."""

    last: dict[str, int] = field(default_factory=dict)
    last_time: float = 0.0
    values: dict[str, float] = field(default_factory=dict)

    def update(self, now: float, values: dict[str, int]) -> None:
        if self.last_time and now > self.last_time:
            dt = now - self.last_time
            for name, key in LOADED.items():
                per_minute = (values[key] - self.last.get(key, 0)) * 60.0 / dt
                for label, window in LOAD_WINDOWS:
                    e = math.exp(-dt / window)
                    slot = f"{name}/{label}"
                    self.values[slot] = self.values.get(slot, per_minute) * e + per_minute * (1 - e)
        else:  # the first sample: no rate yet
            for name in LOADED:
                for label, _ in LOAD_WINDOWS:
                    self.values[f"{name}/{label}"] = 0.0
        self.last = {key: values[key] for key in LOADED.values()}
        self.last_time = now


def clients_table(broker: Broker, limit: int = 1000) -> list[dict[str, Any]]:
    """Sessions for the status page and ``jetmq clients``: connected first."""
    out: list[dict[str, Any]] = []
    for session in broker.hub.sessions:
        out.append(
            {
                "client_id": session.client_id,
                "connected": session.conn is not None,
                "protocol": {3: "3.1", 4: "3.1.1", 5: "5.0"}.get(session.protocol_version, "?"),
                "expiry": session.expiry_interval,
                "subscriptions": len(session.subscriptions),
                "inflight": len(session.outgoing),
                "queued": session.queued,
            }
        )
    out.sort(key=lambda c: (not c["connected"], c["client_id"]))
    return out[:limit]


def subscriptions_table(broker: Broker, limit: int = 5000) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for session in broker.hub.sessions:
        for topic_filter, record in session.subscriptions.items():
            out.append(
                {
                    "client_id": session.client_id,
                    "filter": topic_filter.decode("utf-8", "replace"),
                    "qos": record.qos,
                }
            )
            if len(out) >= limit:
                return out
    return out


def store_tables(broker: Broker) -> list[dict[str, Any]]:
    """Streams and their consumers (worker thread: the store's synchronous helpers)."""
    st = broker.store_client.store
    out: list[dict[str, Any]] = []
    for name in st.stream_names():
        info = st.stream_info(name)
        consumers = []
        for cname in st.consumer_names(name):
            c = st.consumer_info(name, cname)
            consumers.append(
                {
                    "name": cname,
                    "num_pending": c.num_pending,
                    "num_ack_pending": c.num_ack_pending,
                    "ack_floor": c.ack_floor.stream_seq,
                    "delivered": c.delivered.stream_seq,
                }
            )
        out.append(
            {
                "name": name,
                "subjects": list(info.config.subjects or []),
                "messages": info.state.messages,
                "bytes": info.state.bytes,
                "first_seq": info.state.first_seq,
                "last_seq": info.state.last_seq,
                "consumers": consumers,
            }
        )
    return out


def summary(broker: Broker, started: float) -> dict[str, Any]:
    """``/api/stats``: the counters with the uptime and the time they were read."""
    from broker import __version__

    return {
        "version": __version__,
        "uptime": int(time.monotonic() - started),
        "time": time.time(),
        **counters(broker),
    }

"""``$SYS/broker/...``: the broker's figures as retained messages, under mosquitto's names
where mosquitto has one, every ``[sys] interval`` seconds (0: off).

As mosquitto does, a topic is published only when its value changed since the last
publication (``uptime`` changes every time). They are retained in memory only (never
stored: ``broker.persist.state``), all published anew at start. The messages go through
``Hub.publish_now`` with origin 0 (the broker): clients cannot publish under ``$SYS``
(``broker.core.systopics``), and filters starting with a wildcard do not match it
[MQTT-4.7.2-1], so only subscribers that ask for ``$SYS/...`` get them.

Values are text, as mosquitto sends them ("12", "jetmq version 0.1.0", "30 seconds";
loads with two decimals).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from broker import __version__
from broker.core.message import AppMessage
from broker.mqtt.packets import Publish
from broker.ops import view

if TYPE_CHECKING:
    from broker.net.runtime import Broker

# $SYS topic (under $SYS/broker/) -> counter name (broker.ops.view.counters).
TOPICS = {
    "clients/connected": "clients_connected",
    "clients/disconnected": "clients_disconnected",
    "clients/maximum": "clients_maximum",
    "clients/total": "clients_total",
    "messages/received": "packets_received",
    "messages/sent": "packets_sent",
    "publish/messages/received": "publish_received",
    "publish/messages/sent": "publish_sent",
    "publish/messages/dropped": "publish_dropped",
    "publish/bytes/received": "publish_bytes_received",
    "bytes/received": "bytes_received",
    "bytes/sent": "bytes_sent",
    "subscriptions/count": "subscriptions",
    "retained messages/count": "retained",
    # jetmq's own: the LMDB store.
    "store/size": "store_size_bytes",
    "store/map/size": "store_map_size_bytes",
    "store/map/used": "store_map_used_percent",
    "store/streams": "store_streams",
    "store/commits": "store_commits",
    # jetmq's own: JetStream over MQTT and the NATS bridge.
    "jetstream/enabled": "jetstream_enabled",
    "jetstream/streams": "jetstream_streams",
    "jetstream/consumers": "jetstream_consumers",
    "bridge/connected": "bridge_connected",
    "bridge/in_flight": "bridge_in_flight",
    "bridge/pending": "bridge_pending",
    "bridge/forwarded": "bridge_forwarded",
    "bridge/imported": "bridge_imported",
    "bridge/js_published": "bridge_js_published",
    "bridge/forward_dropped": "bridge_forward_dropped",
}


class SysTree:
    """Publishes the ``$SYS`` topics of one broker (see module docstring)."""

    def __init__(self, broker: Broker, started: float) -> None:
        self.broker = broker
        self.started = started  # time.monotonic() at start
        self.loads = view.Loads()
        self._last: dict[bytes, bytes] = {}

    def values(self, now: float) -> dict[str, str]:
        """Every topic (under ``$SYS/broker/``) and its text now; updates the loads."""
        counters = view.counters(self.broker)
        self.loads.update(now, counters)
        out = {
            "version": f"jetmq version {__version__}",
            "uptime": f"{int(now - self.started)} seconds",
        }
        for topic, key in TOPICS.items():
            out[topic] = str(counters[key])
        for topic, value in self.loads.values.items():
            out[f"load/{topic}"] = f"{value:.2f}"
        return out

    def publish(self, now: float | None = None) -> int:
        """Publish the values that changed; how many were published."""
        values = self.values(time.monotonic() if now is None else now)
        hub = self.broker.hub
        sent = 0
        for name, text in values.items():
            topic = b"$SYS/broker/" + name.encode()
            payload = text.encode()
            if self._last.get(topic) == payload:
                continue
            self._last[topic] = payload
            hub.publish_now(AppMessage(Publish(topic, payload, 0, True), None, 0))
            sent += 1
        return sent

    async def run(self) -> None:
        """Publish at once, then every ``[sys] interval`` seconds (read each time: a reload
        may change it; 0 pauses until it is set again)."""
        while True:
            interval = self.broker.config.sys.interval
            if interval:
                self.publish()
                await trio.sleep(interval)
            else:
                await trio.sleep(1.0)

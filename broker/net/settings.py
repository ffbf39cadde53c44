"""Settings: the configuration values the network layer reads per connect or per message,
copied out of the live configuration.

The configuration is pydantic models, and reading one of their fields costs several times
what reading a plain attribute does (pydantic's classes define ``__getattr__``, so every
read takes the slow path; compiled, ``hotpath``, a native attribute is a load). A connect
read about twenty of them. ``Broker`` makes a ``Settings`` from each configuration it
applies, at start and at every reload, so what comes next sees the new values, as when
they were read from the configuration itself.
"""

from __future__ import annotations

from broker.config import BrokerConfig


class Settings:
    def __init__(self, config: BrokerConfig) -> None:
        mqtt = config.mqtt
        self.max_packet_size = int(mqtt.max_packet_size)
        self.connect_timeout = float(mqtt.connect_timeout)
        self.max_keepalive = int(mqtt.max_keepalive)
        self.max_client_id_length = int(mqtt.max_client_id_length)
        self.max_session_expiry_interval = int(mqtt.max_session_expiry_interval)
        self.maximum_qos = int(mqtt.maximum_qos)
        self.receive_maximum = int(mqtt.receive_maximum)
        self.retain_available = bool(mqtt.retain_available)
        self.log_connections = bool(config.log.connections)
        self.max_connections = int(config.limits.max_connections)
        self.max_publish_rate = float(config.limits.max_publish_rate)
        self.max_outbound_queue = int(config.sessions.max_outbound_queue)

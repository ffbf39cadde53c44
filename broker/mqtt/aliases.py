"""Topic aliases of one connection (MQTT 5 §3.3.2.3.4): the peer's, which resolve inbound
PUBLISHes, and ours, assigned least recently used first when the peer allows them; and the
rule for topics that travel in properties (a Response Topic is a Topic Name).

Sans-I/O like the rest of the package; :class:`broker.mqtt.connection.Connection` owns one
``TopicAliases`` and passes in the maxima both sides announced.
"""

from __future__ import annotations

from dataclasses import replace

from broker.mqtt.errors import MQTTProtocolError, protocol_error
from broker.mqtt.packets import Publish
from broker.mqtt.reason_codes import ReasonCode

# (alias, first use, topic evicted), decided before a PUBLISH is encoded and committed
# only once it is.
AliasPlan = tuple[int, bool, bytes | None]


class TopicAliases:
    __slots__ = ("inbound", "outbound")

    def __init__(self) -> None:
        self.inbound: dict[int, bytes] = {}
        self.outbound: dict[bytes, int] = {}  # LRU order: oldest first

    def resolve(self, packet: Publish, maximum: int) -> Publish:
        """``packet`` with its alias resolved (and recorded, when it carries the topic);
        ``maximum`` is the Topic Alias Maximum we announced."""
        props = packet.properties
        alias = props.topic_alias
        if alias is None:
            if not packet.topic:
                raise protocol_error("PUBLISH with an empty Topic Name and no Topic Alias")
            return packet
        if alias == 0 or alias > maximum:
            raise MQTTProtocolError(
                ReasonCode.TOPIC_ALIAS_INVALID,
                f"Topic Alias {alias} outside 1..{maximum} [MQTT-3.3.2-8] [MQTT-3.3.2-9]",
            )
        topic = packet.topic
        if topic:
            self.inbound[alias] = topic
        else:
            known = self.inbound.get(alias)
            if known is None:
                raise protocol_error(f"Topic Alias {alias} has no mapping on this connection")
            topic = known
        return replace(packet, topic=topic, properties=replace(props, topic_alias=None))

    def plan(self, topic: bytes, peer_maximum: int) -> AliasPlan | None:
        """The alias for ``topic`` towards the peer without committing anything; None when
        the peer accepts none."""
        if not peer_maximum:
            return None
        known = self.outbound.get(topic)
        if known is not None:
            return known, False, None
        if len(self.outbound) < peer_maximum:
            return len(self.outbound) + 1, True, None
        oldest = next(iter(self.outbound))
        return self.outbound[oldest], True, oldest

    def commit(self, topic: bytes, plan: AliasPlan) -> None:
        aliases = self.outbound
        if plan[2] is not None:
            del aliases[plan[2]]
        aliases.pop(topic, None)
        aliases[topic] = plan[0]


def has_wildcard(topic: str | None) -> bool:
    """A Response Topic is a Topic Name: no wildcards [MQTT-3.3.2-14] (a will's too: its
    properties are those of the PUBLISH it becomes)."""
    return topic is not None and ("+" in topic or "#" in topic)

"""Topics the broker owns: the reserved ``$`` prefixes clients may not publish to.

MQTT lets a broker give ``$`` topics a meaning of its own; filters starting with a
wildcard do not match them [MQTT-4.7.2-1], and otherwise they are ordinary topics
(``$aws/things/...`` is everyday IoT firmware, and mosquitto carries it). jetmq carries
them too, except under the prefixes it owns: ``$SYS`` (broker status), ``$JS`` (the
JetStream API and ack topics) and ``$MQTT`` (the streams that hold MQTT state). A client
can publish there neither by PUBLISH nor by will: a will could otherwise plant a retained
``$SYS/broker/version`` that no client can clear.
"""

from __future__ import annotations

RESERVED_PREFIXES = (b"$SYS", b"$JS", b"$MQTT")


def reserved_prefix(topic: bytes) -> bytes | None:
    """The reserved prefix ``topic`` falls under (a whole first level), or None."""
    if topic[:1] != b"$":
        return None
    first = topic.split(b"/", 1)[0]
    return first if first in RESERVED_PREFIXES else None

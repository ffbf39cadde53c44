"""The codec's public face: ``encode``, the incremental ``Decoder``, ``EncodedPublish``.

The code lives in :mod:`broker.mqtt.decoder` and :mod:`broker.mqtt.encoder`; this module
only gathers the names the broker imports.
"""

from __future__ import annotations

from broker.mqtt.decoder import MAX_PACKET_SIZE, Decoder
from broker.mqtt.encoder import EncodedPublish, encode

__all__ = ["MAX_PACKET_SIZE", "Decoder", "EncodedPublish", "encode"]

"""Subscription options packed into the radix per-subscription handle (spec/radix.md §6.2.6).

The C index stores one opaque 64-bit handle per (filter, client); the publish
path unpacks it to decide QoS, No Local, Retain As Published and which
Subscription Identifier to send, without a dictionary lookup per recipient.

| bits  | content                                   |
|-------|-------------------------------------------|
| 0-1   | granted QoS                               |
| 2     | No Local                                  |
| 3     | Retain As Published                       |
| 4-5   | Retain Handling                           |
| 32-59 | Subscription Identifier (0 = none)        |
"""

from __future__ import annotations

QOS_MASK = 0x3
NO_LOCAL = 0x4
RETAIN_AS_PUBLISHED = 0x8
RH_SHIFT = 4
SUB_ID_SHIFT = 32
SUB_ID_MAX = 268_435_455


def pack(
    qos: int, *, no_local: bool, retain_as_published: bool, retain_handling: int, sub_id: int
) -> int:
    """Pack subscription options; ``sub_id`` 0 means no Subscription Identifier."""
    if not 0 <= qos <= 2 or not 0 <= retain_handling <= 2 or not 0 <= sub_id <= SUB_ID_MAX:
        raise ValueError("subscription option out of range")
    return (
        qos
        | (NO_LOCAL if no_local else 0)
        | (RETAIN_AS_PUBLISHED if retain_as_published else 0)
        | (retain_handling << RH_SHIFT)
        | (sub_id << SUB_ID_SHIFT)
    )

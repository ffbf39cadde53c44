"""Topic-name and topic-filter validation (spec 6.2.2) without an index."""

from __future__ import annotations

from radix._errors import check
from radix._radix import ffi, lib

STRICT_UTF8 = 1


def validate_topic(topic: bytes, *, strict_utf8: bool = True) -> None:
    """Raise a :class:`radix.TopicError` subclass unless ``topic`` is a valid PUBLISH topic."""
    check(lib.radix_validate_topic(topic, len(topic), STRICT_UTF8 if strict_utf8 else 0))


def validate_filter(filt: bytes, *, strict_utf8: bool = True) -> tuple[bytes | None, bytes]:
    """Validate a SUBSCRIBE filter; return ``(share_name or None, filter without $share/S/)``."""
    offs = ffi.new("size_t[3]")
    check(
        lib.radix_validate_filter(
            filt, len(filt), STRICT_UTF8 if strict_utf8 else 0, offs, offs + 1, offs + 2
        )
    )
    share_off, share_len, filter_off = int(offs[0]), int(offs[1]), int(offs[2])
    share = filt[share_off : share_off + share_len] if share_len else None
    return share, filt[filter_off:]

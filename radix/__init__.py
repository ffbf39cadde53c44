"""Typed wrapper over the C radix tree and MQTT topic index (``radix._radix``)."""

from __future__ import annotations

from radix._radix import ffi, lib


def version() -> str:
    """Version string compiled into the C library."""
    raw: bytes = ffi.string(lib.radix_version())
    return raw.decode("ascii")

"""The NATS header block (``NATS/1.0\\r\\n`` then ``Name: value\\r\\n`` lines and a blank line),
as a message record stores it (store.keys, the ``msgs`` table). Standard library only.
"""

from __future__ import annotations

from store.failures import RecordError


def encode_headers(headers: tuple[tuple[str, str], ...]) -> bytes:
    """The ``NATS/1.0`` header block for ``headers`` (empty bytes when there are none)."""
    if not headers:
        return b""
    return ("NATS/1.0\r\n" + "".join([f"{k}: {v}\r\n" for k, v in headers]) + "\r\n").encode()


def decode_headers(block: bytes) -> tuple[tuple[str, str], ...]:
    if not block:
        return ()
    text = block.decode()
    lines = text.split("\r\n")
    if not lines or not lines[0].startswith("NATS/1.0"):
        raise RecordError("header block does not start with NATS/1.0")
    out: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if not sep:
            raise RecordError(f"malformed header line {line!r}")
        out.append((k.strip(), v.strip()))
    return tuple(out)


# The last block decoded by decode_headers_shared and its headers.
_last: tuple[bytes, tuple[tuple[str, str], ...]] = (b"", ())


def decode_headers_shared(block: bytes) -> tuple[tuple[str, str], ...]:
    """``decode_headers(block)``, the same tuple again while the blocks repeat (a stream's
    messages mostly share theirs: deliveries decode each block once, and the broker's
    per-headers caches see one object)."""
    global _last
    last = _last
    if last[0] == block:
        return last[1]
    out = decode_headers(block)
    _last = (block, out)
    return out

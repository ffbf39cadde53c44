"""Wire primitives (MQTT 5.0 §1.5): integers, Variable Byte Integers, strings, binary data.

Decoding works on a complete packet body (the fixed header told us its length, and the
decoder only decodes a packet once all of it is buffered), so running off the end of
the body is a Malformed Packet, never "need more data".
"""

from __future__ import annotations

from typing import Final

from broker.mqtt.errors import LocalProtocolError, malformed

__all__ = [
    "MAX_VARINT",
    "Reader",
    "check_utf8",
    "encode_binary",
    "encode_string",
    "encode_string_bytes",
    "encode_varint",
]

#: The largest value a Variable Byte Integer can hold (4 bytes), MQTT 5.0 §1.5.5.
MAX_VARINT: Final = 268_435_455


def _encode_varint_slow(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_VARINT_CACHE: Final[tuple[bytes, ...]] = tuple(_encode_varint_slow(i) for i in range(16384))


def encode_varint(value: int) -> bytes:
    """Encode a Variable Byte Integer with the minimum number of bytes (MQTT-1.5.5-1)."""
    if value < 16384:
        if value < 0:
            raise LocalProtocolError(f"Variable Byte Integer {value} is negative")
        return _VARINT_CACHE[value]
    if value > MAX_VARINT:
        raise LocalProtocolError(f"Variable Byte Integer {value} exceeds {MAX_VARINT}")
    return _encode_varint_slow(value)


def check_utf8(raw: bytes) -> str:
    """Decode an MQTT UTF-8 Encoded String, enforcing §1.5.4.

    Ill-formed UTF-8 and UTF-16 surrogates (U+D800..U+DFFF) are refused by Python's strict
    decoder [MQTT-1.5.4-1]; U+0000 is refused here [MQTT-1.5.4-2]. A BOM is kept, not
    stripped [MQTT-1.5.4-3].
    """
    if raw.isascii():
        if 0 in raw:  # (0: a bytes needle is tried as an int first)
            raise malformed("UTF-8 string contains U+0000 [MQTT-1.5.4-2]")
        return raw.decode("ascii")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise malformed(f"ill-formed UTF-8 string [MQTT-1.5.4-1]: {exc.reason}") from None
    if "\x00" in text:
        raise malformed("UTF-8 string contains U+0000 [MQTT-1.5.4-2]")
    return text


def encode_string(text: str) -> bytes:
    """A Two Byte length followed by the UTF-8 bytes (§1.5.4)."""
    raw = text.encode("utf-8")
    return encode_string_bytes(raw)


def encode_string_bytes(raw: bytes) -> bytes:
    """Length-prefix already UTF-8-encoded bytes (topics and filters are kept as bytes)."""
    size = len(raw)
    if size > 0xFFFF:
        raise LocalProtocolError(f"string of {size} bytes exceeds 65535")
    return size.to_bytes(2, "big") + raw


def encode_binary(data: bytes) -> bytes:
    """Binary Data: a Two Byte length followed by the bytes (§1.5.6)."""
    return encode_string_bytes(data)


class Reader:
    """A cursor over one complete packet body: ``data[pos:end]``."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, size: int, what: str) -> int:
        start = self.pos
        stop = start + size
        if stop > self.end:
            raise malformed(f"packet ends inside {what}")
        self.pos = stop
        return start

    def u8(self, what: str = "a byte") -> int:
        start = self._take(1, what)
        return self.data[start]

    def u16(self, what: str = "a Two Byte Integer") -> int:
        start = self._take(2, what)
        return (self.data[start] << 8) | self.data[start + 1]

    def u32(self, what: str = "a Four Byte Integer") -> int:
        start = self._take(4, what)
        return int.from_bytes(self.data[start : start + 4], "big")

    def varint(self, what: str = "a Variable Byte Integer") -> int:
        value = 0
        shift = 0
        for count in range(4):
            byte = self.u8(what)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if byte == 0 and count:
                    raise malformed(f"{what} not in its shortest form [MQTT-1.5.5-1]")
                return value
            shift += 7
        raise malformed(f"{what} longer than 4 bytes")

    def raw(self, size: int, what: str) -> bytes:
        start = self._take(size, what)
        return self.data[start : start + size]

    def binary(self, what: str = "Binary Data") -> bytes:
        return self.raw(self.u16(what), what)

    def utf8(self, what: str = "a UTF-8 string") -> str:
        return check_utf8(self.binary(what))

    def utf8_bytes(self, what: str = "a UTF-8 string") -> bytes:
        """A UTF-8 string validated per §1.5.4 but kept as bytes (topics, filters)."""
        raw = self.binary(what)
        check_utf8(raw)
        return raw

"""The retained-topic index: stored topic names -> 64-bit handle, matched by filter.

Same threading rule as TopicIndex: one owner thread, no locks.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from radix._errors import ClosedError, ErrorCode, check, raise_for
from radix._radix import ffi, lib

_E_BUFFER = int(ErrorCode.E_BUFFER)
_NOT_FOUND = int(ErrorCode.NOT_FOUND)


class RetainedIndex:
    """Topics of retained messages; :meth:`match` answers a SUBSCRIBE filter.

    The work of a match is proportional to the tree positions the filter can
    reach plus the number of results, not to the number of stored topics.
    """

    def __init__(self, *, strict_utf8: bool = True) -> None:
        r = lib.radix_retained_new(1 if strict_utf8 else 0)
        if r == ffi.NULL:
            raise MemoryError("radix_retained_new")
        self._r: Any = ffi.gc(r, lib.radix_retained_free)
        self._cap = 64
        self._out: Any = ffi.new("uint64_t[]", self._cap)
        self._n: Any = ffi.new("size_t *")

    def _ptr(self) -> Any:
        r = self._r
        if r is None:
            raise ClosedError("RetainedIndex is closed")
        return r

    def close(self) -> None:
        if self._r is not None:
            ffi.release(self._r)
            self._r = None

    def __enter__(self) -> RetainedIndex:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def set(self, topic: bytes, handle: int) -> bool:
        """Store or replace; True when the topic is new. Raises TopicError on a bad topic."""
        return check(lib.radix_retained_set(self._ptr(), topic, len(topic), handle)) == 0

    def remove(self, topic: bytes) -> bool:
        """False when the topic was not stored."""
        return check(lib.radix_retained_remove(self._ptr(), topic, len(topic), ffi.NULL)) == 0

    def get(self, topic: bytes) -> int | None:
        out = ffi.new("uint64_t *")
        rc = check(lib.radix_retained_get(self._ptr(), topic, len(topic), out))
        return None if rc == _NOT_FOUND else int(out[0])

    def match(self, filt: bytes) -> list[int]:
        """Handles of every stored topic matching ``filt`` ("$share/S/" is stripped)."""
        r = self._ptr()
        n = self._n
        rc = lib.radix_retained_match(r, filt, len(filt), self._out, self._cap, n)
        if rc:
            if rc != _E_BUFFER:
                raise_for(rc)
            cap = self._cap
            while cap < n[0]:
                cap *= 2
            self._out = ffi.new("uint64_t[]", cap)
            self._cap = cap
            check(lib.radix_retained_fetch(r, self._out, cap, n))
        return ffi.unpack(self._out, n[0])  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return int(lib.radix_retained_count(self._ptr()))

    @property
    def bytes_used(self) -> int:
        return int(lib.radix_retained_bytes(self._ptr()))

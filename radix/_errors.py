"""One table from C status codes to Python exceptions (py-lmdb style).

Every ``radix_*`` call returns an ``int``; :func:`check` turns the negative ones
into exceptions and passes the others (``RADIX_OK``, ``RADIX_REPLACED``,
``RADIX_NOT_FOUND``) through. The broker maps :class:`TopicError` subclasses to
MQTT reason codes (SUBACK 0x8F, DISCONNECT 0x90/0x81) through ``.code``.
"""

from __future__ import annotations

import enum
from typing import NoReturn


class ErrorCode(enum.IntEnum):
    """C status codes of radix.h (spec 6.2.2); the name is the cause."""

    OK = 0
    REPLACED = 1
    NOT_FOUND = 2
    E_NOMEM = -1
    E_INVAL = -2
    E_BUFFER = -3
    E_STALE = -4
    E_EMPTY = -10
    E_TOO_LONG = -11
    E_NUL = -12
    E_UTF8 = -13
    E_CONTROL = -14
    E_NONCHAR = -15
    E_WILDCARD = -16
    E_PLUS = -17
    E_HASH = -18
    E_SHARE = -19
    E_LEVELS = -20
    E_ALIAS_RANGE = -30
    E_ALIAS_UNKNOWN = -31


class RadixError(Exception):
    """Base of every error raised by the radix wrapper; ``code`` names the C status."""

    code: ErrorCode = ErrorCode.E_INVAL

    def __init__(self, message: str | None = None, code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name)


class InvalidArgumentError(RadixError, ValueError):
    code = ErrorCode.E_INVAL


class ClosedError(RadixError):
    """The object was closed: its C memory is gone (use after free)."""

    code = ErrorCode.E_INVAL


class StaleIteratorError(RadixError):
    code = ErrorCode.E_STALE


class TopicError(RadixError, ValueError):
    """An invalid topic name or topic filter; ``code`` says why."""


class EmptyTopicError(TopicError):
    code = ErrorCode.E_EMPTY


class TopicTooLongError(TopicError):
    code = ErrorCode.E_TOO_LONG


class NulCharacterError(TopicError):
    code = ErrorCode.E_NUL


class Utf8Error(TopicError):
    code = ErrorCode.E_UTF8


class ControlCharacterError(TopicError):
    code = ErrorCode.E_CONTROL


class NonCharacterError(TopicError):
    code = ErrorCode.E_NONCHAR


class WildcardInTopicError(TopicError):
    code = ErrorCode.E_WILDCARD


class PlusWildcardError(TopicError):
    code = ErrorCode.E_PLUS


class HashWildcardError(TopicError):
    code = ErrorCode.E_HASH


class ShareSyntaxError(TopicError):
    code = ErrorCode.E_SHARE


class TooManyLevelsError(TopicError):
    code = ErrorCode.E_LEVELS


class AliasError(RadixError, ValueError):
    """Topic alias errors (DISCONNECT 0x94 for range, 0x82 for unknown)."""


class AliasRangeError(AliasError):
    code = ErrorCode.E_ALIAS_RANGE


class AliasUnknownError(AliasError):
    code = ErrorCode.E_ALIAS_UNKNOWN


_TABLE: dict[int, type[Exception]] = {
    ErrorCode.E_NOMEM: MemoryError,
    ErrorCode.E_INVAL: InvalidArgumentError,
    ErrorCode.E_STALE: StaleIteratorError,
    ErrorCode.E_EMPTY: EmptyTopicError,
    ErrorCode.E_TOO_LONG: TopicTooLongError,
    ErrorCode.E_NUL: NulCharacterError,
    ErrorCode.E_UTF8: Utf8Error,
    ErrorCode.E_CONTROL: ControlCharacterError,
    ErrorCode.E_NONCHAR: NonCharacterError,
    ErrorCode.E_WILDCARD: WildcardInTopicError,
    ErrorCode.E_PLUS: PlusWildcardError,
    ErrorCode.E_HASH: HashWildcardError,
    ErrorCode.E_SHARE: ShareSyntaxError,
    ErrorCode.E_LEVELS: TooManyLevelsError,
    ErrorCode.E_ALIAS_RANGE: AliasRangeError,
    ErrorCode.E_ALIAS_UNKNOWN: AliasUnknownError,
}


def raise_for(rc: int) -> NoReturn:
    """Raise the exception of a negative status (E_BUFFER is handled by callers)."""
    cls = _TABLE.get(rc)
    if cls is None:
        raise RadixError(f"unexpected radix status {rc}")
    if cls is MemoryError:
        raise MemoryError("radix: allocation failed (structure unchanged)")
    raise cls()


def check(rc: int) -> int:
    """Return a non-negative status unchanged; raise for a negative one."""
    if rc < 0:
        raise_for(rc)
    return rc

"""Typed wrapper over the C radix tree, MQTT topic index and retained index.

Imports only ``radix._radix`` (the cffi extension), cffi and the standard
library. Threading: cffi releases the GIL around every C call, so each object
here belongs to ONE thread (the broker's trio thread); nothing is locked.
"""

from __future__ import annotations

from radix._errors import (
    AliasError,
    AliasRangeError,
    AliasUnknownError,
    ClosedError,
    ControlCharacterError,
    EmptyTopicError,
    ErrorCode,
    HashWildcardError,
    InvalidArgumentError,
    NonCharacterError,
    NulCharacterError,
    PlusWildcardError,
    RadixError,
    ShareSyntaxError,
    StaleIteratorError,
    TooManyLevelsError,
    TopicError,
    TopicTooLongError,
    Utf8Error,
    WildcardInTopicError,
)
from radix._radix import ffi, lib
from radix._retained import RetainedIndex
from radix._topics import AliasDirection, Deliveries, SharedPolicy, TopicIndex
from radix._tree import RadixTree, Seek, TreeIterator
from radix._validate import validate_filter, validate_topic

__all__ = [
    "AliasDirection",
    "AliasError",
    "AliasRangeError",
    "AliasUnknownError",
    "ClosedError",
    "ControlCharacterError",
    "Deliveries",
    "EmptyTopicError",
    "ErrorCode",
    "HashWildcardError",
    "InvalidArgumentError",
    "NonCharacterError",
    "NulCharacterError",
    "PlusWildcardError",
    "RadixError",
    "RadixTree",
    "RetainedIndex",
    "Seek",
    "ShareSyntaxError",
    "SharedPolicy",
    "StaleIteratorError",
    "TooManyLevelsError",
    "TopicError",
    "TopicIndex",
    "TopicTooLongError",
    "TreeIterator",
    "Utf8Error",
    "WildcardInTopicError",
    "validate_filter",
    "validate_topic",
    "version",
]


def version() -> str:
    """Version string compiled into the C library."""
    raw: bytes = ffi.string(lib.radix_version())
    return raw.decode("ascii")

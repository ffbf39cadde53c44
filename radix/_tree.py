"""Layer A: the generic radix tree (bytes -> uint64), its iterators and cursors.

Values are unsigned 64-bit integers kept in the C value slot. Closing a tree
frees its live iterators first, so a closed tree or iterator raises
ClosedError instead of touching freed memory. One thread owns a tree.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Iterator
from typing import Any

from radix._errors import ClosedError, ErrorCode, StaleIteratorError, check
from radix._radix import ffi, lib

_E_BUFFER = int(ErrorCode.E_BUFFER)


class Seek(enum.IntEnum):
    FIRST = 0
    LAST = 1
    EQ = 2
    GE = 3
    GT = 4
    LE = 5
    LT = 6


def _val(v: int) -> Any:
    if not 0 <= v <= 0xFFFFFFFFFFFFFFFF:
        raise OverflowError("radix tree values are unsigned 64-bit integers")
    return ffi.cast("void *", v)


def _int(p: Any) -> int:
    return int(ffi.cast("uintptr_t", p))


class RadixTree:
    """A compressed radix tree mapping byte strings to unsigned 64-bit integers."""

    def __init__(self, _ptr: Any = None) -> None:
        t = lib.radix_tree_new() if _ptr is None else _ptr
        if t == ffi.NULL:
            raise MemoryError("radix_tree_new")
        self._t: Any = ffi.gc(t, lambda p: lib.radix_tree_free(p, ffi.NULL, ffi.NULL))
        self._iters: weakref.WeakSet[TreeIterator] = weakref.WeakSet()
        self._old: Any = ffi.new("void **")

    def _ptr(self) -> Any:
        t = self._t
        if t is None:
            raise ClosedError("RadixTree is closed")
        return t

    def close(self) -> None:
        if self._t is not None:
            for it in list(self._iters):
                it.close()
            ffi.release(self._t)
            self._t = None

    def insert(self, key: bytes, value: int) -> bool:
        """True when the key is new; otherwise its value is replaced."""
        return check(lib.radix_tree_insert(self._ptr(), key, len(key), _val(value), self._old)) == 1

    def try_insert(self, key: bytes, value: int) -> bool:
        """Insert only if absent; True when inserted."""
        return (
            check(lib.radix_tree_try_insert(self._ptr(), key, len(key), _val(value), self._old))
            == 1
        )

    def find(self, key: bytes) -> int | None:
        if lib.radix_tree_find(self._ptr(), key, len(key), self._old):
            return _int(self._old[0])
        return None

    def __contains__(self, key: bytes) -> bool:
        return bool(lib.radix_tree_find(self._ptr(), key, len(key), ffi.NULL))

    def remove(self, key: bytes) -> int | None:
        """Remove a key; its value, or None when absent."""
        if lib.radix_tree_remove(self._ptr(), key, len(key), self._old):
            return _int(self._old[0])
        return None

    def remove_prefix(self, prefix: bytes) -> int:
        """Remove every key starting with ``prefix``; returns how many."""
        return int(
            lib.radix_tree_remove_prefix(self._ptr(), prefix, len(prefix), ffi.NULL, ffi.NULL)
        )

    def has_prefix(self, prefix: bytes) -> bool:
        return bool(lib.radix_tree_has_prefix(self._ptr(), prefix, len(prefix)))

    def __len__(self) -> int:
        return int(lib.radix_tree_size(self._ptr()))

    @property
    def nodes(self) -> int:
        return int(lib.radix_tree_nodes(self._ptr()))

    @property
    def bytes_used(self) -> int:
        return int(lib.radix_tree_bytes(self._ptr()))

    @property
    def generation(self) -> int:
        return int(lib.radix_tree_generation(self._ptr()))

    def copy(self) -> RadixTree:
        c = lib.radix_tree_copy(self._ptr())
        if c == ffi.NULL:
            raise MemoryError("radix_tree_copy")
        return RadixTree(c)

    def check(self, strict: bool = True) -> None:
        rc = lib.radix_tree_check(self._ptr(), 1 if strict else 0)
        if rc != 0:
            raise AssertionError(f"radix_tree_check failed: {rc}")

    def dump(self) -> str:
        t = self._ptr()
        length = ffi.new("size_t *")
        cap = 1024
        while True:
            buf = ffi.new("char[]", cap)
            rc = lib.radix_tree_dump(t, buf, cap, length)
            if rc == _E_BUFFER:
                cap = int(length[0])
                continue
            check(rc)
            return bytes(ffi.buffer(buf, int(length[0]))).decode("ascii")

    def iterator(self) -> TreeIterator:
        it = TreeIterator(self)
        self._iters.add(it)
        return it

    def items(self, prefix: bytes = b"", *, reverse: bool = False) -> Iterator[tuple[bytes, int]]:
        """(key, value) pairs in key order (keys starting with ``prefix``)."""
        it = self.iterator()
        try:
            if reverse:
                if prefix:
                    raise ValueError("reverse iteration with a prefix is not supported")
                it.seek(Seek.LAST)
                while it.prev():
                    yield it.key(), it.value()
            else:
                it.seek_prefix(prefix)
                while it.next():
                    yield it.key(), it.value()
        finally:
            it.close()

    def walk(self, path: bytes) -> tuple[bool, bool, int | None] | None:
        """Walk a cursor from the root along ``path``.

        None when the path does not exist, else (is_key, has_children, value).
        """
        t = self._ptr()
        pos = ffi.new("radix_pos *")
        pos[0] = lib.radix_tree_root(t)
        if not lib.radix_pos_walk(t, pos, path, len(path)):
            return None
        is_key = bool(lib.radix_pos_is_key(pos, self._old))
        return is_key, bool(lib.radix_pos_has_children(pos)), _int(self._old[0]) if is_key else None


class TreeIterator:
    """A C iterator; mutating the tree makes next()/prev() raise StaleIteratorError."""

    def __init__(self, tree: RadixTree) -> None:
        self._tree = tree
        it = lib.radix_iter_new(tree._ptr())
        if it == ffi.NULL:
            raise MemoryError("radix_iter_new")
        self._it: Any = ffi.gc(it, lib.radix_iter_free)
        self._len: Any = ffi.new("size_t *")

    def _ptr(self) -> Any:
        it = self._it
        if it is None:
            raise ClosedError("iterator is closed")
        return it

    def close(self) -> None:
        if self._it is not None:
            ffi.release(self._it)
            self._it = None

    def seek(self, op: Seek, key: bytes = b"") -> bool:
        return check(lib.radix_iter_seek(self._ptr(), op, key, len(key))) == 1

    def seek_prefix(self, prefix: bytes) -> bool:
        return check(lib.radix_iter_seek_prefix(self._ptr(), prefix, len(prefix))) == 1

    def next(self) -> bool:
        return check(lib.radix_iter_next(self._ptr())) == 1

    def prev(self) -> bool:
        return check(lib.radix_iter_prev(self._ptr())) == 1

    def _live(self) -> Any:
        it = self._ptr()
        if lib.radix_iter_stale(it):
            raise StaleIteratorError("the tree changed since the last seek")
        return it

    def key(self) -> bytes:
        """Key at the current position (b"" at the end)."""
        p = lib.radix_iter_key(self._live(), self._len)
        return b"" if p == ffi.NULL else bytes(ffi.buffer(p, self._len[0]))

    def value(self) -> int:
        """Value at the current position (0 at the end)."""
        return _int(lib.radix_iter_value(self._live()))

    def copy(self) -> TreeIterator:
        other = self._tree.iterator()
        check(lib.radix_iter_copy(other._ptr(), self._ptr()))
        return other

"""Reading LMDB's own file layout: the newest meta page and the root pages it leads to.

Only for the open-time length check of :mod:`store.env`: a data file may legitimately end
before its last allocated page (pages a transaction allocated at the end and freed again
before committing are never written), so "shorter than the last page" does not mean
damaged; a tree root past the end does. LMDB 0.9 layout, 64-bit builds (py-lmdb's bundled
library):

- every page starts with a 16-byte header: u64 page number, u16 pad, u16 flags
  (``0x01`` branch, ``0x02`` leaf, ``0x08`` meta), u16 lower, u16 upper (native endian);
- pages 0 and 1 are meta pages: after the header u32 magic ``0xBEEFC0DE``, u32 version,
  u64 map address, u64 map size, two 48-byte database records (the free-page tree, then
  the main tree: u32 pad, u16 flags, u16 depth, u64 branch pages, leaf pages, overflow
  pages, entries, root page), u64 last page, u64 transaction id; the newer transaction
  id is the committed state;
- a leaf page's node offsets (u16 each) follow its header up to ``lower``; a node is
  u16 data size low, u16 data size high, u16 flags (``0x02``: the data is a named
  database's 48-byte record), u16 key size, the key, then the data.
"""

from __future__ import annotations

import struct
from typing import Final

MAGIC: Final = 0xBEEFC0DE
NO_PAGE: Final = (1 << 64) - 1  # an empty tree's root
_HEADER = struct.Struct("=QHHHH")
_META = struct.Struct("=IIQQ")
_DB = struct.Struct("=IHHQQQQQ")
_TAIL = struct.Struct("=QQ")
_NODE = struct.Struct("=HHHH")
_PAGE_LEAF: Final = 0x02
_NODE_SUBDATA: Final = 0x02


def committed_roots(path: str, page_size: int) -> list[int]:
    """The root pages of the committed state (the free-page tree, the main tree and each
    named database listed in the main tree's root, when that root is a leaf), read from
    data file ``path``."""
    with open(path, "rb") as f:
        metas = [_meta(f.read(page_size)), _meta(f.read(page_size))]
        valid = [m for m in metas if m is not None]
        if not valid:
            raise ValueError("no valid LMDB meta page")
        free_root, main_root, _ = max(valid, key=lambda m: m[2])
        roots = [r for r in (free_root, main_root) if r != NO_PAGE]
        if main_root != NO_PAGE:
            f.seek(main_root * page_size)
            roots += _named_roots(f.read(page_size))
    return roots


def _meta(page: bytes) -> tuple[int, int, int] | None:
    """(free root, main root, txn id) of a meta page, or None if it is not one."""
    off = _HEADER.size
    if len(page) < off + _META.size + 2 * _DB.size + _TAIL.size:
        return None
    magic = _META.unpack_from(page, off)[0]
    if magic != MAGIC:
        return None
    off += _META.size
    free_root = _DB.unpack_from(page, off)[-1]
    main_root = _DB.unpack_from(page, off + _DB.size)[-1]
    txnid = _TAIL.unpack_from(page, off + 2 * _DB.size)[1]  # (last page, txn id)
    return free_root, main_root, txnid


def _named_roots(page: bytes) -> list[int]:
    """The roots of the named databases recorded in a main-tree leaf page (a branch page,
    with more databases than one page holds, gives none: the check then covers less)."""
    if len(page) < _HEADER.size:
        return []
    _, _, flags, lower, _ = _HEADER.unpack_from(page)
    if not flags & _PAGE_LEAF:
        return []
    roots = []
    for i in range((lower - _HEADER.size) // 2):
        (node,) = struct.unpack_from("=H", page, _HEADER.size + 2 * i)
        if node + _NODE.size > len(page):
            break
        lo, hi, nflags, ksize = _NODE.unpack_from(page, node)
        data = node + _NODE.size + ksize
        if nflags & _NODE_SUBDATA and (lo | hi << 16) >= _DB.size and data + _DB.size <= len(page):
            root = _DB.unpack_from(page, data)[-1]
            if root != NO_PAGE:
                roots.append(root)
    return roots

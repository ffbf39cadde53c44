"""The MQTT topic index (Layer B) and its match results.

Threading rule: cffi releases the GIL around every C call, so a TopicIndex
(and the match context it owns) must be used by ONE thread only: the broker's
trio thread. There are no locks.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from radix._errors import ClosedError, ErrorCode, InvalidArgumentError, check, raise_for
from radix._radix import ffi, lib

_E_BUFFER = int(ErrorCode.E_BUFFER)
_NOT_FOUND = int(ErrorCode.NOT_FOUND)
_radix_match = lib.radix_match
_radix_subscribe = lib.radix_subscribe
_radix_match_detailed = lib.radix_match_detailed


class SharedPolicy(enum.IntEnum):
    """How a matching shared group ($share/S/F) contributes members."""

    RANDOM = 0  # one member, seeded PRNG of the index
    ROUND_ROBIN = 1  # one member, per-group cursor
    ALL = 2  # every member, tagged with the group ordinal


class AliasDirection(enum.IntEnum):
    INBOUND = 0  # client -> server, limited by our CONNACK Topic Alias Maximum
    OUTBOUND = 1  # server -> client, limited by the client's CONNECT value


class Deliveries:
    """Result of :meth:`TopicIndex.match_detailed`: parallel lists, sorted by client.

    ``group`` is 0 for a non-shared subscription and the 1-based ordinal of the
    matching shared group otherwise (with ``SharedPolicy.ALL`` several entries
    share an ordinal and the broker picks one). Iterating yields
    ``(client, handle, group)`` tuples.
    """

    __slots__ = ("clients", "groups", "handles")

    def __init__(self, clients: list[int], handles: list[int], groups: list[int]) -> None:
        self.clients = clients
        self.handles = handles
        self.groups = groups

    def __len__(self) -> int:
        return len(self.clients)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return zip(self.clients, self.handles, self.groups, strict=True)

    def __repr__(self) -> str:
        return f"Deliveries({list(self)!r})"


class TopicIndex:
    """Subscriptions (filter, client) -> opaque 64-bit handle, matched by topic.

    ``seed`` seeds the shared-subscription PRNG; ``strict_utf8`` rejects control
    characters and non-characters; ``max_levels`` (0 = unlimited) bounds the
    levels of topics and filters. ``inversion`` keeps the per-client tree that
    :meth:`unsubscribe_all` and :meth:`client_filters` need.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        strict_utf8: bool = True,
        max_levels: int = 0,
        inversion: bool = True,
    ) -> None:
        flags = (1 if strict_utf8 else 0) | (2 if inversion else 0)
        rt = lib.radix_topics_new(flags)
        if rt == ffi.NULL:
            raise MemoryError("radix_topics_new")
        self._rt: Any = ffi.gc(rt, lib.radix_topics_free)
        m = lib.radix_match_ctx_new(seed & 0xFFFFFFFFFFFFFFFF)
        if m == ffi.NULL:
            ffi.release(self._rt)
            raise MemoryError("radix_match_ctx_new")
        self._m: Any = ffi.gc(m, lib.radix_match_ctx_free)
        check(lib.radix_topics_set_max_levels(self._rt, max_levels))
        self._cap = 256
        self._out: Any = ffi.new("uint64_t[]", self._cap)
        # ints are built through a memoryview: measurably faster than ffi.unpack
        self._view = memoryview(ffi.buffer(self._out)).cast("Q")
        self._n: Any = ffi.new("size_t *")
        self._dcap = 64
        self._dc: Any = ffi.new("uint64_t[]", self._dcap)
        self._dh: Any = ffi.new("uint64_t[]", self._dcap)
        self._dg: Any = ffi.new("uint32_t[]", self._dcap)
        self._dviews = self._detail_views()
        self._inversion = inversion

    def _detail_views(self) -> tuple[memoryview, memoryview, memoryview]:
        return (
            memoryview(ffi.buffer(self._dc)).cast("Q"),
            memoryview(ffi.buffer(self._dh)).cast("Q"),
            memoryview(ffi.buffer(self._dg)).cast("I"),
        )

    # -- lifecycle --------------------------------------------------------
    def _ptr(self) -> Any:
        rt = self._rt
        if rt is None:
            raise ClosedError("TopicIndex is closed")
        return rt

    def close(self) -> None:
        """Free the C index and match context; later calls raise ClosedError."""
        if self._rt is not None:
            self._view.release()
            for v in self._dviews:
                v.release()
            ffi.release(self._m)
            ffi.release(self._rt)
            self._rt = None
            self._m = None

    @property
    def closed(self) -> bool:
        return self._rt is None

    def __enter__(self) -> TopicIndex:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- subscriptions ----------------------------------------------------
    def subscribe(self, filt: bytes, client: int, handle: int) -> bool:
        """Add or update; True when new, False when an existing entry was replaced."""
        rt = self._rt
        if rt is None:
            raise ClosedError("TopicIndex is closed")
        rc: int = _radix_subscribe(rt, filt, len(filt), client, handle)
        if rc < 0:
            raise_for(rc)
        return rc == 0

    def unsubscribe(self, filt: bytes, client: int) -> bool:
        """False when (filter, client) was not subscribed (UNSUBACK 0x11)."""
        rc = check(lib.radix_unsubscribe(self._ptr(), filt, len(filt), client))
        return rc != _NOT_FOUND

    def _need_inversion(self) -> None:
        if not self._inversion:
            raise InvalidArgumentError("this TopicIndex was created with inversion=False")

    def unsubscribe_all(self, client: int) -> int:
        """Remove every subscription of ``client``; returns how many."""
        self._need_inversion()
        n = ffi.new("size_t *")
        check(lib.radix_unsubscribe_all(self._ptr(), client, n))
        return int(n[0])

    def client_filters(self, client: int) -> list[bytes]:
        """The filters ``client`` is subscribed to, as sent ($share/S/ included), sorted."""
        self._need_inversion()
        rt = self._ptr()
        length = ffi.new("size_t *")
        count = ffi.new("size_t *")
        cap = 256
        while True:
            buf = ffi.new("uint8_t[]", cap)
            rc = lib.radix_client_filters(rt, client, buf, cap, length, count)
            if rc == _E_BUFFER:
                cap = int(length[0])
                continue
            check(rc)
            break
        raw = bytes(ffi.buffer(buf, int(length[0])))
        out: list[bytes] = []
        i = 0
        while i < len(raw):
            n = (raw[i] << 8) | raw[i + 1]
            out.append(raw[i + 2 : i + 2 + n])
            i += 2 + n
        return out

    def client_remove(self, client: int) -> None:
        """Forget a client entirely: subscriptions and aliases."""
        check(lib.radix_client_remove(self._ptr(), client))

    # -- matching ---------------------------------------------------------
    def match(self, topic: bytes, policy: SharedPolicy = SharedPolicy.RANDOM) -> list[int]:
        """Recipient client ids, ascending, de-duplicated (ids mode)."""
        rt = self._rt
        if rt is None:
            raise ClosedError("TopicIndex is closed")
        n = self._n
        rc = _radix_match(rt, self._m, topic, len(topic), policy, self._out, self._cap, n)
        if rc:
            if rc != _E_BUFFER:
                raise_for(rc)
            self._grow(int(n[0]))
            check(lib.radix_match_fetch(self._m, self._out, self._cap, n))
        return self._view[: n[0]].tolist()

    def _grow(self, need: int) -> None:
        cap = self._cap
        while cap < need:
            cap *= 2
        self._view.release()
        self._out = ffi.new("uint64_t[]", cap)
        self._view = memoryview(ffi.buffer(self._out)).cast("Q")
        self._cap = cap

    def match_detailed(self, topic: bytes, policy: SharedPolicy = SharedPolicy.ALL) -> Deliveries:
        """Every matching (client, handle, group), sorted by client (stable)."""
        rt = self._ptr()
        n = self._n
        rc = _radix_match_detailed(
            rt, self._m, topic, len(topic), policy, self._dc, self._dh, self._dg, self._dcap, n
        )
        if rc:
            if rc != _E_BUFFER:
                raise_for(rc)
            cap = self._dcap
            while cap < n[0]:
                cap *= 2
            for v in self._dviews:
                v.release()
            self._dc = ffi.new("uint64_t[]", cap)
            self._dh = ffi.new("uint64_t[]", cap)
            self._dg = ffi.new("uint32_t[]", cap)
            self._dviews = self._detail_views()
            self._dcap = cap
            check(lib.radix_match_fetch_detailed(self._m, self._dc, self._dh, self._dg, cap, n))
        k = n[0]
        vc, vh, vg = self._dviews
        return Deliveries(vc[:k].tolist(), vh[:k].tolist(), vg[:k].tolist())

    # -- topic aliases (parity with mr_rax; the broker may keep dicts) -----
    def alias_set(
        self, client: int, direction: AliasDirection, alias: int, maximum: int, topic: bytes
    ) -> None:
        """Map ``alias`` (1..maximum) to ``topic`` for one connection and direction."""
        if not 0 <= alias <= 0xFFFF or not 0 <= maximum <= 0xFFFF:
            raise_for(ErrorCode.E_ALIAS_RANGE)
        check(
            lib.radix_alias_set(self._ptr(), client, direction, alias, maximum, topic, len(topic))
        )

    def alias_topic(self, client: int, direction: AliasDirection, alias: int) -> bytes:
        """The topic of an alias; AliasUnknownError when none is set."""
        if not 0 <= alias <= 0xFFFF:
            raise_for(ErrorCode.E_ALIAS_UNKNOWN)
        rt = self._ptr()
        length = ffi.new("size_t *")
        cap = 256
        while True:
            buf = ffi.new("uint8_t[]", cap)
            rc = lib.radix_alias_topic(rt, client, direction, alias, buf, cap, length)
            if rc == _E_BUFFER:
                cap = int(length[0])
                continue
            check(rc)
            return bytes(ffi.buffer(buf, int(length[0])))

    def alias_of_topic(self, client: int, direction: AliasDirection, topic: bytes) -> int | None:
        """The alias currently naming ``topic`` (lowest one inbound), or None."""
        out = ffi.new("uint16_t *")
        rc = check(lib.radix_alias_of_topic(self._ptr(), client, direction, topic, len(topic), out))
        return None if rc == _NOT_FOUND else int(out[0])

    def alias_clear(self, client: int) -> None:
        """Drop both alias maps of a connection (call on every disconnect)."""
        check(lib.radix_alias_clear(self._ptr(), client))

    # -- counters and debugging -------------------------------------------
    @property
    def subscriptions(self) -> int:
        return int(lib.radix_topics_subscriptions(self._ptr()))

    @property
    def filters(self) -> int:
        return int(lib.radix_topics_filters(self._ptr()))

    @property
    def bytes_used(self) -> int:
        """Allocator-tracked bytes of the index (both trees, lists, aliases)."""
        return int(lib.radix_topics_bytes(self._ptr()))

    @property
    def nodes(self) -> int:
        return int(lib.radix_topics_nodes(self._ptr()))

    @property
    def allocations(self) -> int:
        """Allocations made so far by the index (monotonic)."""
        return int(lib.radix_topics_allocs(self._ptr()))

    @property
    def match_allocations(self) -> int:
        """Allocations made so far by the match context (monotonic)."""
        self._ptr()
        return int(lib.radix_match_ctx_allocs(self._m))

    def dump(self, client_tree: bool = False) -> str:
        """Debug rendering of the topic tree (or the client tree)."""
        rt = self._ptr()
        length = ffi.new("size_t *")
        which = 1 if client_tree else 0
        cap = 4096
        while True:
            buf = ffi.new("char[]", cap)
            rc = lib.radix_topics_dump(rt, which, buf, cap, length)
            if rc == _E_BUFFER:
                cap = int(length[0])
                continue
            check(rc)
            return bytes(ffi.buffer(buf, int(length[0]))).decode("ascii")

    def check(self) -> None:
        """Run the C invariant checker; raise AssertionError on a violation."""
        rc = lib.radix_topics_check(self._ptr())
        if rc != 0:
            raise AssertionError(f"radix_topics_check failed: {rc}")

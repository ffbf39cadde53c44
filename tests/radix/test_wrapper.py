"""The Python wrapper: handle ownership, buffer growth, allocation counts, Layer A API."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import radix
from radix._radix import ffi, lib


def test_use_after_close_is_a_clear_error() -> None:
    idx = radix.TopicIndex()
    idx.subscribe(b"a", 1, 0)
    idx.close()
    idx.close()  # idempotent
    assert idx.closed
    with pytest.raises(radix.ClosedError):
        idx.match(b"a")
    with pytest.raises(radix.ClosedError):
        idx.subscribe(b"a", 1, 0)
    with pytest.raises(radix.ClosedError):
        _ = idx.subscriptions
    ret = radix.RetainedIndex()
    ret.close()
    with pytest.raises(radix.ClosedError):
        ret.match(b"#")
    tree = radix.RadixTree()
    it = tree.iterator()
    tree.close()
    with pytest.raises(radix.ClosedError):
        it.next()
    with pytest.raises(radix.ClosedError):
        tree.insert(b"k", 1)


def test_match_grows_its_buffer_without_rematching() -> None:
    with radix.TopicIndex(seed=9) as idx:
        for c in range(1, 1001):
            idx.subscribe(b"big/#", c, c)
        for c in range(2000, 2010):
            idx.subscribe(b"$share/g/big/x", c, c)
        got = idx.match(b"big/x")
        assert len(got) == 1001
        assert got[:1000] == list(range(1, 1001))
        assert 2000 <= got[1000] < 2010
        det = idx.match_detailed(b"big/x")
        assert len(det) == 1010
        assert det.handles[:1000] == list(range(1, 1001))
        assert set(det.groups[1000:]) == {1}


def test_steady_state_match_allocates_nothing() -> None:
    with radix.TopicIndex(seed=1) as idx:
        for i in range(200):
            idx.subscribe(f"s/{i % 7}/+/x".encode(), i, i)
            idx.subscribe(f"s/{i % 5}/#".encode(), i + 1000, i)
            idx.subscribe(f"$share/g{i % 3}/s/+/#".encode(), i, i)
        topics = [f"s/{i % 9}/{i}/x".encode() for i in range(50)]
        for t in topics:  # warm-up grows the scratch buffers
            idx.match(t)
            idx.match_detailed(t)
        before = (idx.match_allocations, idx.allocations, idx.bytes_used)
        for _ in range(20):
            for t in topics:
                idx.match(t)
                idx.match(t, radix.SharedPolicy.ROUND_ROBIN)
                idx.match_detailed(t)
        assert (idx.match_allocations, idx.allocations, idx.bytes_used) == before


def test_invalid_policy_and_values() -> None:
    with radix.TopicIndex() as idx:
        with pytest.raises(radix.InvalidArgumentError):
            idx.match(b"a", 3)  # type: ignore[arg-type]
        with pytest.raises(OverflowError):
            idx.subscribe(b"a", -1, 0)
    with pytest.raises(radix.InvalidArgumentError):
        radix.TopicIndex(inversion=False).unsubscribe_all(1)


def test_radix_imports_only_its_extension_and_cffi() -> None:
    code = (
        "import sys, json; before = set(sys.modules); import radix; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    std = set(sys.stdlib_module_names) | {"__future__"}
    tops = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert {t for t in tops if t not in std and not t.startswith("_")} <= {"radix", "cffi"}


# retained ---------------------------------------------------------------------------


def test_retained_filter_semantics() -> None:
    with radix.RetainedIndex() as ret:
        for i, t in enumerate(
            [b"a", b"a/b", b"a/b/c", b"a/", b"$SYS/x", b"b/b", b"/b", b"ab/b", b"a/bc"]
        ):
            assert ret.set(t, i)
        assert not ret.set(b"a", 0)
        assert sorted(ret.match(b"a/#")) == [0, 1, 2, 3, 8]
        assert sorted(ret.match(b"#")) == [0, 1, 2, 3, 5, 6, 7, 8]
        assert sorted(ret.match(b"+/b")) == [1, 5, 6, 7]  # "/b": empty first level
        assert sorted(ret.match(b"+/+")) == [1, 3, 5, 6, 7, 8]
        assert sorted(ret.match(b"+")) == [0]
        assert sorted(ret.match(b"$SYS/#")) == [4]
        assert ret.match(b"+/x") == []
        assert sorted(ret.match(b"a/+/#")) == [1, 2, 3, 8]
        assert sorted(ret.match(b"$share/g/a/b")) == [1]
        assert ret.remove(b"a/b")
        assert not ret.remove(b"a/b")
        assert ret.get(b"a/b") is None
        assert len(ret) == 8
        with pytest.raises(radix.WildcardInTopicError):
            ret.set(b"a/+", 1)
        with pytest.raises(radix.HashWildcardError):
            ret.match(b"a/#/b")


def test_retained_many_results_grow_the_buffer() -> None:
    with radix.RetainedIndex() as ret:
        for i in range(500):
            ret.set(f"r/{i}".encode(), i)
        assert sorted(ret.match(b"r/+")) == list(range(500))
        empty = radix.RetainedIndex()
        for i in range(500):
            ret.remove(f"r/{i}".encode())
        assert ret.bytes_used <= empty.bytes_used + 8 * 1024  # only the grown result scratch
        empty.close()


# Layer A ----------------------------------------------------------------------------


def test_tree_dump_golden() -> None:
    tree = radix.RadixTree()
    for i, k in enumerate([b"foo", b"foobar", b"footer", b"fox"]):
        tree.insert(k, i)
    assert tree.dump() == (
        "(root)\n"
        "  'f' \"o\"\n"
        "    'o' \"\" =key\n"
        "      'b' \"ar\" =key\n"
        "      't' \"er\" =key\n"
        "    'x' \"\" =key\n"
    )
    assert tree.nodes == 6
    assert tree.walk(b"foo") == (True, True, 0)
    assert tree.walk(b"fo") == (False, True, None)
    assert tree.walk(b"fooz") is None
    tree.close()


def test_stale_iterator_raises() -> None:
    tree = radix.RadixTree()
    tree.insert(b"a", 1)
    it = tree.iterator()
    assert it.seek(radix.Seek.FIRST)
    gen = tree.generation
    tree.insert(b"b", 2)
    assert tree.generation > gen
    with pytest.raises(radix.StaleIteratorError):
        it.next()
    with pytest.raises(radix.StaleIteratorError):
        it.value()
    with pytest.raises(radix.StaleIteratorError):
        it.key()
    assert it.seek(radix.Seek.GE, b"a")
    assert it.next()
    copy = it.copy()
    assert it.next()
    assert it.key() == b"b"
    assert copy.next()
    assert copy.key() == b"b"
    tree.close()


def test_deep_key_has_no_recursion_limit() -> None:
    tree = radix.RadixTree()
    keys = [b"x" * n for n in range(0, 3000, 7)]
    for k in keys:
        tree.insert(k, len(k))
    tree.check()
    assert [k for k, _ in tree.items()] == keys
    assert tree.remove_prefix(b"xx") == len(keys) - 1
    assert tree.remove(b"") == 0
    other = radix.RadixTree()
    assert tree.nodes == 1
    assert tree.bytes_used == other.bytes_used
    tree.close()
    other.close()


def test_buffer_overflow_fetches_instead_of_rematching() -> None:
    # A re-match would draw again from the PRNG and shift every later pick; the
    # picks must equal those of a C-level reference that never overflows.
    subs = [(b"big/#", c) for c in range(1, 400)]
    subs += [(b"$share/g/big/x", c) for c in range(1000, 1050)]
    subs += [(b"$share/h/big/#", c) for c in range(2000, 2050)]
    with radix.TopicIndex(seed=77) as idx:
        for filt, c in subs:
            idx.subscribe(filt, c, c)
        got = [idx.match(b"big/x")[399:] for _ in range(5)]
    rt = lib.radix_topics_new(1)
    m = lib.radix_match_ctx_new(77)
    try:
        for filt, c in subs:
            assert lib.radix_subscribe(rt, filt, len(filt), c, c) == 0
        out = ffi.new("uint64_t[]", 4096)
        n = ffi.new("size_t *")
        want = []
        for _ in range(5):
            assert lib.radix_match(rt, m, b"big/x", 5, 0, out, 4096, n) == 0
            want.append(ffi.unpack(out, n[0])[399:])
    finally:
        lib.radix_match_ctx_free(m)
        lib.radix_topics_free(rt)
    assert got == want
    assert all(len(p) == 2 for p in got)

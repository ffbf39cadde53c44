"""Hypothesis: the C index, tree and retained index against trivial Python models."""

from __future__ import annotations

import bisect
import os

from hypothesis import given, settings
from hypothesis import strategies as st

import radix
from tests.radix.mqtt_model import BruteIndex, filter_matches, split_share

LEVELS_T = [b"a", b"b", b"", b"$x", "é".encode(), b"ab"]
LEVELS_F = [*LEVELS_T, b"+"]

topic_st = st.lists(st.sampled_from(LEVELS_T), min_size=1, max_size=5).map(b"/".join).filter(bool)


@st.composite
def filter_st(draw: st.DrawFn) -> bytes:
    levels = draw(st.lists(st.sampled_from(LEVELS_F), min_size=0, max_size=4))
    if draw(st.booleans()) or not levels:
        levels = [*levels, b"#"]
    inner = b"/".join(levels)
    if not inner:
        inner = b"a"
    if draw(st.integers(0, 4)) == 0:
        return b"$share/" + draw(st.sampled_from([b"g", b"h"])) + b"/" + inner
    return inner


sub_st = st.tuples(filter_st(), st.integers(1, 6), st.integers(0, 2**64 - 1))
# RADIX_HYPOTHESIS_EXAMPLES raises the bound for a long local run (default keeps CI fast).
SETTINGS = settings(
    max_examples=int(os.environ.get("RADIX_HYPOTHESIS_EXAMPLES", "200")), deadline=None
)


@SETTINGS
@given(
    subs=st.lists(sub_st, max_size=30),
    unsubs=st.lists(st.tuples(filter_st(), st.integers(1, 6)), max_size=10),
    topics=st.lists(topic_st, min_size=1, max_size=8),
    seed=st.integers(0, 2**64 - 1),
)
def test_match_equals_brute_force(
    subs: list[tuple[bytes, int, int]],
    unsubs: list[tuple[bytes, int]],
    topics: list[bytes],
    seed: int,
) -> None:
    model = BruteIndex()
    with radix.TopicIndex(seed=seed) as idx:
        for filt, client, handle in subs:
            assert idx.subscribe(filt, client, handle) == model.subscribe(filt, client, handle)
        for filt, client in unsubs:
            assert idx.unsubscribe(filt, client) == model.unsubscribe(filt, client)
        assert idx.subscriptions == len(model.subs)
        for topic in topics:
            direct = model.nonshared(topic)
            groups = model.groups(topic)
            # ids mode, every member of every group: exact
            everyone = set(direct)
            for members in groups.values():
                everyone |= set(members)
            assert idx.match(topic, radix.SharedPolicy.ALL) == sorted(everyone)
            # ids mode, one pick per group
            got = set(idx.match(topic))
            assert set(direct) <= got <= everyone
            for members in groups.values():
                assert got & set(members)
            # detailed, random: every direct entry plus exactly one entry per group
            det = list(idx.match_detailed(topic, radix.SharedPolicy.RANDOM))
            assert sorted((c, h) for c, h, g in det if g == 0) == sorted(
                (c, h) for c, hs in direct.items() for h in hs
            )
            picked = [(c, h, g) for c, h, g in det if g]
            assert len(picked) == len(groups)
            assert len({g for _, _, g in picked}) == len(groups)
            for c, h, _ in picked:
                assert any(members.get(c) == h for members in groups.values())
            assert [c for c, _, _ in det] == sorted(c for c, _, _ in det)
        idx.check()
        for filt, client in list(model.subs):
            assert idx.unsubscribe(filt, client)
        assert idx.nodes == 1
        assert idx.filters == 0


def _inner_matches(filt: bytes, topic: bytes) -> bool:
    return filter_matches(split_share(filt)[1], topic)


@SETTINGS
@given(
    stored=st.dictionaries(topic_st, st.integers(0, 2**64 - 1), max_size=40),
    removed=st.lists(topic_st, max_size=10),
    filters=st.lists(filter_st(), min_size=1, max_size=8),
)
def test_retained_equals_brute_force(
    stored: dict[bytes, int], removed: list[bytes], filters: list[bytes]
) -> None:
    model = dict(stored)
    with radix.RetainedIndex() as ret:
        for topic, handle in stored.items():
            assert ret.set(topic, handle)
        for topic in removed:
            assert ret.remove(topic) == (model.pop(topic, None) is not None)
        assert len(ret) == len(model)
        for filt in filters:
            want = sorted(h for t, h in model.items() if _inner_matches(filt, t))
            assert sorted(ret.match(filt)) == want
        for topic, handle in model.items():
            assert ret.get(topic) == handle


key_st = st.binary(max_size=6).map(lambda b: bytes(x % 4 + 0x61 if x < 250 else x for x in b))
op_st = st.one_of(
    st.tuples(st.just("insert"), key_st, st.integers(0, 2**64 - 1)),
    st.tuples(st.just("try_insert"), key_st, st.integers(0, 2**64 - 1)),
    st.tuples(st.just("remove"), key_st, st.just(0)),
    st.tuples(st.just("remove_prefix"), key_st.map(lambda k: k[:2]), st.just(0)),
)


@SETTINGS
@given(ops=st.lists(op_st, max_size=60), probes=st.lists(key_st, max_size=6))
def test_tree_equals_dict_model(ops: list[tuple[str, bytes, int]], probes: list[bytes]) -> None:
    model: dict[bytes, int] = {}
    tree = radix.RadixTree()
    try:
        for op, key, value in ops:
            if op == "insert":
                assert tree.insert(key, value) == (key not in model)
                model[key] = value
            elif op == "try_insert":
                assert tree.try_insert(key, value) == (key not in model)
                model.setdefault(key, value)
            elif op == "remove":
                assert tree.remove(key) == model.pop(key, None)
            else:
                gone = [k for k in model if k.startswith(key)]
                assert tree.remove_prefix(key) == len(gone)
                for k in gone:
                    del model[k]
            tree.check(strict=True)
        keys = sorted(model)
        assert list(tree.items()) == [(k, model[k]) for k in keys]
        assert list(tree.items(reverse=True)) == [(k, model[k]) for k in reversed(keys)]
        assert len(tree) == len(model)
        it = tree.iterator()
        for probe in probes:
            lo = bisect.bisect_left(keys, probe)
            hi = bisect.bisect_right(keys, probe)
            expect = {
                radix.Seek.GE: keys[lo] if lo < len(keys) else None,
                radix.Seek.GT: keys[hi] if hi < len(keys) else None,
                radix.Seek.LE: keys[hi - 1] if hi > 0 else None,
                radix.Seek.LT: keys[lo - 1] if lo > 0 else None,
                radix.Seek.EQ: probe if probe in model else None,
            }
            for seek_op, want in expect.items():
                found = it.seek(seek_op, probe) and it.next()
                assert (it.key() if found else None) == want, (seek_op, probe)
            pre = probe[:1]
            assert [k for k, _ in tree.items(pre)] == [k for k in keys if k.startswith(pre)]
            assert tree.has_prefix(pre) == any(k.startswith(pre) for k in keys)
            assert tree.find(probe) == model.get(probe)
        it.close()
        copy = tree.copy()
        assert list(copy.items()) == list(tree.items())
        copy.close()
        for k in keys:
            tree.remove(k)
        assert tree.nodes == 1
    finally:
        tree.close()

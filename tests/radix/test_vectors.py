"""Spec section 7.1-7.3: the seed subscriptions, publish vectors, regressions D1-D4, mutations."""

from __future__ import annotations

from collections import Counter

import pytest

import radix

SEED = [
    (b"foo/bar", 1),
    (b"foo/bar", 2),
    (b"foo/bar/", 3),
    (b"$share/baz/foo/bar", 4),
    (b"$share/baz/foo/bar", 5),
    (b"$share/bazzle/foo/bar", 6),
    (b"+/bar", 7),
    (b"foo/#", 8),
    (b"foo/#", 1),
    (b"foo/#", 128),
    (b"$SYS/foo/#", 1),
    ("酒/吧".encode(), 8),
]


def seeded(seed: int = 1) -> radix.TopicIndex:
    idx = radix.TopicIndex(seed=seed)
    for filt, client in SEED:
        assert idx.subscribe(filt, client, client * 10)
    return idx


def test_seed_counters_7_1() -> None:
    with seeded() as idx:
        assert idx.subscriptions == 12
        assert idx.filters == 8
        idx.check()


def test_seed_key_layout_7_1() -> None:
    # H . F . 0xFF and H . F . 0xFE . S . 0xFF, '/' kept inside keys (fixes D1)
    with seeded() as idx:
        assert idx.dump() == (
            "(root)\n"
            "  '$' \"$SYS/foo/#\\xff\" =key\n"
            "  '@' \"\"\n"
            "    '+' \"/bar\\xff\" =key\n"
            "    'f' \"oo/\"\n"
            "      '#' \"\\xff\" =key\n"
            "      'b' \"ar\"\n"
            "        '/' \"\\xff\" =key\n"
            "        '\\xfe' \"baz\"\n"
            "          'z' \"le\\xff\" =key\n"
            "          '\\xff' \"\" =key\n"
            "        '\\xff' \"\" =key\n"
            "    '\\xe9' \"\\x85\\x92/\\xe5\\x90\\xa7\\xff\" =key\n"
        )
        assert idx.client_filters(1) == [b"$SYS/foo/#", b"foo/#", b"foo/bar"]
        # be64(client) . 'S' . filter: client 1 and client 128 share the first 7 bytes
        client_tree = idx.dump(client_tree=True)
        assert client_tree.startswith("(root)\n  '\\x00' \"\\x00\\x00\\x00\\x00\\x00\\x00\"\n")
        assert "    '\\x01' \"S\"\n      '$' \"SYS/foo/#\" =key\n" in client_tree
        assert "    '\\x80' \"Sfoo/#\" =key\n" in client_tree


def test_seed_foo_bar_picks_one_of_each_group_7_2() -> None:
    with seeded() as idx:
        ids = idx.match(b"foo/bar")
        fixed = {1, 2, 7, 8, 128, 6}
        assert fixed <= set(ids)
        assert len(set(ids) & {4, 5}) == 1
        assert len(ids) == 7
        assert ids == sorted(ids)


EXACT_7_2 = [
    (b"foo/bar/", [1, 3, 8, 128]),
    (b"foo", [1, 8, 128]),
    (b"foo/", [1, 8, 128]),
    (b"$SYS/foo/x", [1]),
    (b"$SYS/foo", [1]),
    (b"$SYS", []),
    (b"$SYS/bar", []),
    ("酒/吧".encode(), [8]),
    ("酒".encode(), []),
    (b"foo/baz/qux", [1, 8, 128]),
    (b"/foo", []),
    (b"foo//bar", [1, 8, 128]),
    (b"/bar", [7]),
    (b"bar", []),
    (b"x/bar", [7]),
    (b"bar/bar", [7]),
    (b"Foo/bar", [7]),
    (b"foo/bar/baz", [1, 8, 128]),
    (b"//bar", []),
    (b"/", []),
    (b"$share/baz/foo/bar", []),
    (b"$foo/bar", []),
    (b"foo/bar ", [1, 8, 128]),
]


@pytest.mark.parametrize(("topic", "expected"), EXACT_7_2)
def test_publish_vectors_7_2(topic: bytes, expected: list[int]) -> None:
    with seeded() as idx:
        assert idx.match(topic) == expected


def test_shared_group_distribution_over_1000_seeded_runs() -> None:
    counts: Counter[int] = Counter()
    for seed in range(1000):
        with seeded(seed + 1) as idx:
            ids = set(idx.match(b"foo/bar"))
            counts.update(ids & {4, 5})
    assert counts[4] + counts[5] == 1000
    assert 400 <= counts[4] <= 600
    assert 400 <= counts[5] <= 600


def test_same_seed_same_picks() -> None:
    with seeded(42) as a, seeded(42) as b:
        assert [a.match(b"foo/bar") for _ in range(50)] == [b.match(b"foo/bar") for _ in range(50)]


def test_round_robin_alternates() -> None:
    with seeded() as idx:
        picks = [
            set(idx.match(b"foo/bar", radix.SharedPolicy.ROUND_ROBIN)) & {4, 5} for _ in range(4)
        ]
        assert picks == [{4}, {5}, {4}, {5}]


def test_detailed_all_policy_tags_groups() -> None:
    with seeded() as idx:
        got = list(idx.match_detailed(b"foo/bar"))
        assert [c for c, _, _ in got] == [1, 1, 2, 4, 5, 6, 7, 8, 128]
        groups = {c: g for c, _, g in got if g}
        assert groups[4] == groups[5] != groups[6]
        assert all(h == c * 10 for c, h, _ in got)
        assert {g for c, _, g in got if c not in (4, 5, 6)} == {0}


def test_detailed_random_policy_one_member_per_group() -> None:
    with seeded() as idx:
        got = list(idx.match_detailed(b"foo/bar", radix.SharedPolicy.RANDOM))
        shared = [(c, g) for c, _, g in got if g]
        assert len(shared) == 2
        assert len({g for _, g in shared}) == 2


# 7.3 regression and semantic vectors ------------------------------------------------

REGRESSIONS: list[tuple[list[tuple[bytes, int]], list[tuple[bytes, list[int]]]]] = [
    (  # D1
        [(b"foo/bar", 1)],
        [(b"foobar", []), (b"foo/bar", [1]), (b"fo/obar", []), (b"foob/ar", [])],
    ),
    (  # D1
        [(b"foob/ar", 2), (b"foo/x", 3)],
        [(b"foo/bar", []), (b"foob/ar", [2]), (b"foo/x", [3])],
    ),
    (  # D2
        [(b"foo/+/#", 9), (b"+/#", 10), (b"+/+/#", 11), (b"#", 12), (b"+", 13), (b"+/+", 14)],
        [
            (b"foo/bar", [9, 10, 11, 12, 14]),
            (b"foo", [10, 12, 13]),
            (b"foo/bar/baz", [9, 10, 11, 12]),
            (b"a/b/c/d", [10, 11, 12]),
            (b"$SYS/x", []),
            (b"/", [10, 11, 12, 14]),
        ],
    ),
    (  # D3: must not crash
        [(b"+/site6/x", 1), (b"+/site32/#", 2)],
        [(b"r0/site24/y", []), (b"r0/site32", [2]), (b"r0/site32/q", [2]), (b"r0/site6/x", [1])],
    ),
    (
        [
            (b"#", 1),
            (b"+/#", 2),
            (b"+", 3),
            (b"$SYS/#", 4),
            (b"+/monitor/Clients", 5),
            (b"$SYS/monitor/+", 6),
            (b"$share/g/#", 7),
            (b"$share/g/$SYS/#", 8),
        ],
        [
            (b"$SYS/monitor/Clients", [4, 6, 8]),
            (b"$SYS", [4, 8]),
            (b"a", [1, 2, 3, 7]),
            (b"$", []),
            (b"x/monitor/Clients", [1, 2, 5, 7]),
            (b"$share/g/x", []),
        ],
    ),
    (
        [
            (b"/", 1),
            (b"+/+", 2),
            (b"/#", 3),
            (b"+", 4),
            (b"//", 5),
            (b"+//+", 6),
            (b"foo//bar", 7),
            (b"foo/+/bar", 8),
        ],
        [
            (b"/", [1, 2, 3]),
            (b"//", [3, 5, 6]),
            (b"/a", [2, 3]),
            (b"a/", [2]),
            (b"///", [3]),
            (b"foo//bar", [6, 7, 8]),
            (b"foo/x/bar", [8]),
        ],
    ),
    (  # MQTT 4.7 examples
        [
            (b"sport/tennis/player1/#", 1),
            (b"sport/#", 2),
            (b"sport/tennis/#", 3),
            (b"sport/+", 4),
            (b"+/+", 5),
            (b"/+", 6),
            (b"+", 7),
            (b"sport/+/player1", 8),
        ],
        [
            (b"sport/tennis/player1", [1, 2, 3, 8]),
            (b"sport/tennis/player1/ranking", [1, 2, 3]),
            (b"sport/tennis/player1/score/wimbledon", [1, 2, 3]),
            (b"sport", [2, 7]),
            (b"sport/", [2, 4, 5]),
            (b"/finance", [5, 6]),
            (b"sport/tennis/player2", [2, 3]),
        ],
    ),
]


@pytest.mark.parametrize(("subs", "pubs"), REGRESSIONS)
def test_regression_vectors_7_3(
    subs: list[tuple[bytes, int]], pubs: list[tuple[bytes, list[int]]]
) -> None:
    with radix.TopicIndex(seed=3) as idx:
        for filt, client in subs:
            idx.subscribe(filt, client, 0)
        for topic, expected in pubs:
            assert idx.match(topic) == expected, topic


def test_shared_group_identity_is_name_and_filter_7_3() -> None:
    seen_ab: set[tuple[int, ...]] = set()
    for seed in range(1, 200):
        with radix.TopicIndex(seed=seed) as idx:
            idx.subscribe(b"$share/g1/a/#", 1, 0)
            idx.subscribe(b"$share/g1/a/#", 2, 0)
            idx.subscribe(b"$share/g1/a/b", 3, 0)
            idx.subscribe(b"$share/g2/a/b", 4, 0)
            idx.subscribe(b"a/b", 1, 0)
            got = tuple(idx.match(b"a/b"))
            assert got in ((1, 3, 4), (1, 2, 3, 4))
            seen_ab.add(got)
            assert idx.match(b"a") in ([1], [2])
            assert idx.match(b"a/c") in ([1], [2])
            assert len({g for _, _, g in idx.match_detailed(b"a/b") if g}) == 3
    assert seen_ab == {(1, 3, 4), (1, 2, 3, 4)}


def test_d4_empty_topic_is_rejected() -> None:
    with radix.TopicIndex() as idx:
        idx.subscribe(b"foo/bar/", 3, 0)
        idx.subscribe(b"+", 4, 0)
        with pytest.raises(radix.EmptyTopicError):
            idx.match(b"")
        with pytest.raises(radix.ShareSyntaxError):
            idx.subscribe(b"$share/x", 1, 0)


# mutation vectors -------------------------------------------------------------------


def test_unsubscribe_vectors() -> None:
    with seeded() as idx:
        assert idx.unsubscribe(b"foo/bar", 1)
        assert 1 in idx.match(b"foo/bar")  # still through foo/#
        assert not idx.unsubscribe(b"foo/bar", 1)


def test_resubscribe_replaces_handle() -> None:
    with seeded() as idx:
        assert idx.subscribe(b"foo/bar", 2, 7) is False
        assert idx.subscriptions == 12
        assert (2, 7, 0) in list(idx.match_detailed(b"foo/bar"))


def test_unsubscribe_shared_member() -> None:
    with seeded() as idx:
        assert idx.unsubscribe(b"$share/baz/foo/bar", 4)
        for _ in range(20):
            assert idx.match(b"foo/bar") == [1, 2, 5, 6, 7, 8, 128]


def test_unsubscribe_all_vectors() -> None:
    with seeded() as idx:
        assert idx.unsubscribe_all(1) == 3
        ids = idx.match(b"foo/bar")
        assert {2, 6, 7, 8, 128} <= set(ids)
        assert len(set(ids) & {4, 5}) == 1
        assert 1 not in ids
        assert idx.match(b"foo") == [8, 128]
        assert idx.match(b"$SYS/foo/x") == []
        assert idx.subscriptions == 9
        assert idx.filters == 7
        assert idx.client_filters(1) == []
        idx.check()


def test_removing_everything_returns_memory_to_empty() -> None:
    with radix.TopicIndex() as empty:
        empty_bytes = empty.bytes_used
        empty_nodes = empty.nodes
    assert empty_nodes == 1
    with seeded() as idx:
        assert idx.bytes_used > empty_bytes
        for filt, client in SEED:
            assert idx.unsubscribe(filt, client)
        assert idx.filters == 0
        assert idx.subscriptions == 0
        assert idx.nodes == 1
        assert idx.bytes_used == empty_bytes
        idx.check()


def test_client_filters_and_client_remove() -> None:
    with seeded() as idx:
        assert idx.client_filters(8) == [b"foo/#", "酒/吧".encode()]
        idx.alias_set(8, radix.AliasDirection.INBOUND, 1, 5, b"a/b")
        idx.client_remove(8)
        assert idx.client_filters(8) == []
        assert 8 not in idx.match(b"foo/x")
        with pytest.raises(radix.AliasUnknownError):
            idx.alias_topic(8, radix.AliasDirection.INBOUND, 1)

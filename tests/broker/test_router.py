"""The router's per-topic route cache: answers stay those of a fresh match through every
subscription change, and results that depend on the publisher or on a pick are never
reused (real radix index, no broker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.core import handles
from broker.core.router import CACHED_TOPIC_MAX, Delivery, Router


def _h(qos: int = 1, *, no_local: bool = False, sub_id: int = 0) -> int:
    return handles.pack(
        qos, no_local=no_local, retain_as_published=False, retain_handling=0, sub_id=sub_id
    )


def _always(_client: int) -> bool:
    return True


@pytest.fixture
def r() -> Iterator[Router]:
    rt = Router(seed=1)
    yield rt
    rt.close()


def test_a_cached_route_follows_subscribe_unsubscribe_and_unsubscribe_all(r: Router) -> None:
    assert r.route(b"a/b", 9, _always) == []
    r.subscribe(1, b"a/b", _h(1))
    assert r.route(b"a/b", 9, _always) == [Delivery(1, 1, False, ())]
    assert r.route(b"a/b", 9, _always) == [Delivery(1, 1, False, ())]  # from the cache
    r.subscribe(2, b"a/+", _h(0, sub_id=7))
    assert sorted(r.route(b"a/b", 9, _always)) == [
        Delivery(1, 1, False, ()),
        Delivery(2, 0, False, (7,)),
    ]
    r.subscribe(1, b"a/b", _h(2))  # replaced options
    assert sorted(r.route(b"a/b", 9, _always))[0] == Delivery(1, 2, False, ())
    r.unsubscribe(1, b"a/b")
    assert r.route(b"a/b", 9, _always) == [Delivery(2, 0, False, (7,))]
    r.unsubscribe_all(2)
    assert r.route(b"a/b", 9, _always) == []


def test_no_local_routes_depend_on_the_publisher_and_are_not_reused(r: Router) -> None:
    r.subscribe(1, b"t", _h(1, no_local=True))
    assert r.route(b"t", 1, _always) == []
    assert r.route(b"t", 2, _always) == [Delivery(1, 1, False, ())]
    assert r.route(b"t", 1, _always) == []
    r.subscribe(3, b"#", _h(0))  # two subscribers, one of them No Local
    assert r.route(b"t", 1, _always) == [Delivery(3, 0, False, ())]
    assert sorted(r.route(b"t", 3, _always)) == [
        Delivery(1, 1, False, ()),
        Delivery(3, 0, False, ()),
    ]
    assert r.route(b"t", 1, _always) == [Delivery(3, 0, False, ())]


def test_shared_groups_pick_again_on_every_publish(r: Router) -> None:
    r.subscribe(1, b"$share/g/s", _h(1))
    r.subscribe(2, b"$share/g/s", _h(1))
    picks = {r.route(b"s", 9, _always)[0].client for _ in range(4)}
    assert picks == {1, 2}


def test_the_cache_is_bounded() -> None:
    r = Router(route_cache_size=8)
    try:
        r.subscribe(1, b"x/#", _h(1))
        for i in range(20):
            assert r.route(f"x/{i}".encode(), 9, _always) == [Delivery(1, 1, False, ())]
        assert len(r._routes) <= 8
    finally:
        r.close()


def test_a_long_topic_is_routed_but_not_cached() -> None:
    """A topic may be 65,535 bytes: one above ``CACHED_TOPIC_MAX`` is matched every time
    (a cache of such keys, filled by PUBLISHes to fresh topics, would hold a GiB)."""
    r = Router()
    try:
        r.subscribe(1, b"x/#", _h(1))
        long_topic = b"x/" + b"y" * CACHED_TOPIC_MAX
        for _ in range(2):
            assert r.route(long_topic, 9, _always) == [Delivery(1, 1, False, ())]
            assert r.route(b"z/" + b"y" * 60_000, 9, _always) == []
        assert r._routes == {}
        assert r.route(b"x/short", 9, _always) == [Delivery(1, 1, False, ())]
        assert list(r._routes) == [b"x/short"]
    finally:
        r.close()

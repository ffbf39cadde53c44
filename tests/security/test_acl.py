"""The ACL file parser and matcher: every rule kind, deny precedence, %c/%u that can never
widen a grant, ``$`` topics needing rules that name them, and the SUBSCRIBE overlap rule."""

from __future__ import annotations

import pytest

from broker.security.acl import CACHED_TOPIC_MAX, AclFileError, covers, overlaps, parse

ACL = """
# anonymous section: before any user line
topic read public/#
topic deny public/secret/#

user alice
topic readwrite home/alice/#
topic write alerts
topic read $SYS/broker/#
topic deny home/alice/private/#

user bob
topic home/bob/#

pattern readwrite clients/%c/#
pattern read users/%u/inbox/#
pattern deny clients/%c/locked/#
"""


def levels(text: str) -> tuple[str, ...]:
    return tuple(text.split("/"))


def test_every_rule_kind() -> None:
    acl = parse(ACL)
    alice = acl.access_for("phone", "alice")
    assert alice.may_read(b"home/alice/temp")
    assert alice.may_write(b"home/alice/temp")
    assert alice.may_write(b"alerts")
    assert not alice.may_read(b"alerts")  # write only
    assert not alice.may_read(b"home/alice/private/diary")  # deny wins
    assert not alice.may_write(b"home/alice/private/diary")
    assert alice.may_read(b"$SYS/broker/uptime")
    assert not alice.may_read(b"public/news")  # the anonymous section is not hers
    bob = acl.access_for("laptop", "bob")
    assert bob.may_read(b"home/bob/x")  # no access word: readwrite
    assert bob.may_write(b"home/bob/x")
    anon = acl.access_for("kiosk", None)
    assert anon.may_read(b"public/news")
    assert not anon.may_read(b"public/secret/plans")
    assert not anon.may_write(b"public/news")
    assert not anon.may_read(b"home/bob/x")
    # Patterns apply to everyone, with their own client id and username.
    assert bob.may_write(b"clients/laptop/status")
    assert not bob.may_write(b"clients/phone/status")
    assert not bob.may_write(b"clients/laptop/locked/x")
    assert alice.may_read(b"users/alice/inbox/1")
    assert not alice.may_read(b"users/bob/inbox/1")
    assert not anon.may_read(b"users/kiosk/inbox/1")  # no username: %u grants nothing


def test_a_long_topic_is_decided_every_time_and_not_cached() -> None:
    """A client's decisions are cached per topic, but not for a topic longer than
    ``CACHED_TOPIC_MAX`` (65,535-byte topics would make the cache hold GiBs)."""
    alice = parse(ACL).access_for("phone", "alice")
    long_topic = b"home/alice/" + b"t" * CACHED_TOPIC_MAX
    denied = b"home/alice/private/" + b"t" * CACHED_TOPIC_MAX
    for _ in range(2):
        assert alice.may_read(long_topic)
        assert alice.may_write(long_topic)
        assert not alice.may_read(denied)
    assert alice._cache == {}
    assert alice.may_read(b"home/alice/temp")
    assert list(alice._cache) == [b"home/alice/temp"]


def test_dollar_topics_need_rules_that_name_them() -> None:
    acl = parse("user root\ntopic readwrite #\ntopic read +/x\n")
    root = acl.access_for("c", "root")
    assert root.may_read(b"anything/at/all")
    assert not root.may_read(b"$SYS/broker/uptime")
    assert not root.may_write(b"$JS/API/STREAM/CREATE/ORDERS")
    assert not root.may_read(b"$JS/x")  # '+/x' does not match '$JS/x' either
    assert not root.may_subscribe(b"$SYS/#")
    assert root.may_subscribe(b"#")  # '#' itself never matches $ topics


@pytest.mark.parametrize("client_id", ["+", "#", "a/b", "a+", "x#", ""])
def test_client_id_with_wildcards_never_widens_a_pattern(client_id: str) -> None:
    acl = parse("pattern readwrite clients/%c/#\npattern deny private/%c/#\n")
    access = acl.access_for(client_id, None)
    for topic in (b"clients/other/x", b"clients/a/b/x", b"clients/+/x", b"clients/x"):
        assert not access.may_write(topic)
        assert not access.may_read(topic)
    assert not access.may_subscribe(b"clients/#")
    assert not access.may_subscribe(b"clients/+/#")
    assert not access.may_subscribe(f"clients/{client_id}/#".encode())


def test_a_deny_pattern_with_an_unusable_value_denies_wider() -> None:
    acl = parse("topic readwrite private/#\npattern deny private/%c/#\n")
    assert not acl.access_for("a/b", None).may_read(b"private/zz/x")  # as if '+'
    assert acl.access_for("ok", None).may_read(b"private/zz/x")
    assert not acl.access_for("ok", None).may_read(b"private/ok/x")


def test_username_with_wildcards_never_widens_a_pattern() -> None:
    acl = parse("pattern read users/%u/#\n")
    assert not acl.access_for("c", "#").may_read(b"users/alice/x")
    assert not acl.access_for("c", "+").may_subscribe(b"users/+/x")
    assert acl.access_for("c", "alice").may_subscribe(b"users/alice/#")


def test_subscribe_overlap_rule() -> None:
    acl = parse("topic read a/#\ntopic deny a/secret/#\ntopic read b/+/c\n")
    access = acl.access_for("c", None)
    assert not access.may_subscribe(b"a/#")  # could match a/secret/...
    assert not access.may_subscribe(b"a/+/x")  # could match a/secret/x
    assert not access.may_subscribe(b"#")
    assert not access.may_subscribe(b"+/secret")
    assert access.may_subscribe(b"a/public/#")  # the grant is narrower: granted
    assert access.may_subscribe(b"a/x")
    assert access.may_subscribe(b"b/+/c")
    assert access.may_subscribe(b"b/1/c")
    assert not access.may_subscribe(b"b/#")  # not covered by any grant
    assert not access.may_subscribe(b"b/+/+")


def test_covers_and_overlaps() -> None:
    assert covers(levels("a/#"), levels("a"))
    assert covers(levels("a/#"), levels("a/b/#"))
    assert not covers(levels("a/+/#"), levels("a/#"))
    assert covers(levels("a/+/#"), levels("a/b/#"))
    assert not covers(levels("a/+"), levels("a/#"))
    assert not covers(levels("#"), levels("$SYS/#"))
    assert covers(levels("$SYS/#"), levels("$SYS/broker/+"))
    assert overlaps(levels("a/#"), levels("a"))
    assert overlaps(levels("+/b"), levels("a/+"))
    assert not overlaps(levels("a/b"), levels("a/c"))
    assert not overlaps(levels("#"), levels("$SYS/x"))
    assert not overlaps(levels("a/b/c"), levels("a/b"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topic read a/#/b\n", "line 1: invalid topic filter"),
        ("user\n", "line 1: 'user' needs a username"),
        ("grant read a\n", "line 1: unknown keyword 'grant'"),
        ("\ntopic read a/%c\n", "line 2: %c / %u only work in 'pattern' lines"),
        ("topic\n", "line 1: 'topic' needs a topic"),
    ],
)
def test_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(AclFileError, match=message):
        parse(text, "acl")

"""Spec section 7.4: one error code per cause, for topic names and topic filters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import radix
from radix import ErrorCode as E
from tests.radix.mqtt_model import filter_error, topic_error

OK = None

# (input, as publish topic, as filter); None = valid
VECTORS: list[tuple[bytes, E | None, E | None]] = [
    (b"", E.E_EMPTY, E.E_EMPTY),
    (b"+/bar", E.E_WILDCARD, OK),
    (b"foo/+", E.E_WILDCARD, OK),
    (b"#", E.E_WILDCARD, OK),
    (b"foo/#", E.E_WILDCARD, OK),
    (b"foo+bar", E.E_WILDCARD, E.E_PLUS),
    (b"foo/#/bar", E.E_WILDCARD, E.E_HASH),
    (b"foo#", E.E_WILDCARD, E.E_HASH),
    (b"#/", E.E_WILDCARD, E.E_HASH),
    (b"foo/bar#", E.E_WILDCARD, E.E_HASH),
    (b"foo/+bar", E.E_WILDCARD, E.E_PLUS),
    (b"+foo", E.E_WILDCARD, E.E_PLUS),
    (b"foo\0bar", E.E_NUL, E.E_NUL),
    (b"\xff", E.E_UTF8, E.E_UTF8),
    (b"\xc0\xaf", E.E_UTF8, E.E_UTF8),
    (b"\xed\xa0\x80", E.E_UTF8, E.E_UTF8),
    (b"\xf4\x90\x80\x80", E.E_UTF8, E.E_UTF8),
    (b"\xe9\x85", E.E_UTF8, E.E_UTF8),
    (b"a\x1fb", E.E_CONTROL, E.E_CONTROL),
    (b"a\xc2\x85b", E.E_CONTROL, E.E_CONTROL),
    (b"\xef\xb7\x90", E.E_NONCHAR, E.E_NONCHAR),
    (b"\xef\xbf\xbe", E.E_NONCHAR, E.E_NONCHAR),
    (b"\xef\xbb\xbffoo", OK, OK),
    (b"x" * 65535, OK, OK),
    (b"x" * 65536, E.E_TOO_LONG, E.E_TOO_LONG),
    (b"/" * 32768, OK, OK),
    (b"$share/", OK, E.E_SHARE),
    (b"$share/x", OK, E.E_SHARE),
    (b"$share/x/", OK, E.E_SHARE),
    (b"$share//foo", OK, E.E_SHARE),
    (b"$share/a+b/foo", E.E_WILDCARD, E.E_SHARE),
    (b"$share/a#/foo", E.E_WILDCARD, E.E_SHARE),
    (b"$share/g/foo/#/x", E.E_WILDCARD, E.E_HASH),
    (b"$share", OK, OK),
    (b"$sharex/y/z", OK, OK),
    (b"$SHARE/a/b", OK, OK),
]


def _code(fn: object, data: bytes, strict: bool = True) -> E | None:
    try:
        if fn is radix.validate_topic:
            radix.validate_topic(data, strict_utf8=strict)
        else:
            radix.validate_filter(data, strict_utf8=strict)
    except radix.TopicError as exc:
        return exc.code
    return None


@pytest.mark.parametrize(("data", "as_topic", "as_filter"), VECTORS)
def test_validation_vectors_7_4(data: bytes, as_topic: E | None, as_filter: E | None) -> None:
    assert _code(radix.validate_topic, data) == as_topic
    assert _code(radix.validate_filter, data) == as_filter


@pytest.mark.parametrize(
    "data", [b"a\x1fb", b"a\xc2\x85b", b"\xef\xb7\x90", b"\xef\xbf\xbe", b"\xf4\x8f\xbf\xbf"]
)
def test_lenient_mode_accepts_control_and_nonchars(data: bytes) -> None:
    assert _code(radix.validate_topic, data, strict=False) is None
    assert _code(radix.validate_filter, data, strict=False) is None
    assert _code(radix.validate_topic, data, strict=True) is not None


@pytest.mark.parametrize(
    ("filt", "share", "inner"),
    [
        (b"$share/g/#", b"g", b"#"),
        (b"$share/g/$SYS/#", b"g", b"$SYS/#"),
        (b"$share/g/foo/+/#", b"g", b"foo/+/#"),
        (b"foo/bar", None, b"foo/bar"),
        (b"$share", None, b"$share"),
    ],
)
def test_validate_filter_splits_share(filt: bytes, share: bytes | None, inner: bytes) -> None:
    assert radix.validate_filter(filt) == (share, inner)


def test_exception_classes_carry_codes() -> None:
    with pytest.raises(radix.WildcardInTopicError) as info:
        radix.validate_topic(b"a/+")
    assert info.value.code is E.E_WILDCARD
    assert info.value.code.name == "E_WILDCARD"
    assert isinstance(info.value, ValueError)


def test_max_levels_boundary() -> None:
    with radix.TopicIndex(max_levels=3) as idx:
        assert idx.subscribe(b"a/b/c", 1, 0)
        assert idx.subscribe(b"$share/g/a/b/#", 1, 0)
        with pytest.raises(radix.TooManyLevelsError):
            idx.subscribe(b"a/b/c/d", 1, 0)
        assert idx.match(b"a/b/c") == [1]
        with pytest.raises(radix.TooManyLevelsError):
            idx.match(b"a/b/c/d")


def test_deep_topic_does_not_overflow_the_stack() -> None:
    topic = b"/" * 32768
    with radix.TopicIndex() as idx:
        idx.subscribe(b"#", 1, 0)
        idx.subscribe(topic, 2, 0)
        idx.subscribe(b"+/" * 1000 + b"#", 3, 0)
        assert idx.match(topic) == [1, 2, 3]
        assert idx.unsubscribe(topic, 2)
        idx.check()


_PIECES = [
    b"a",
    b"/",
    b"+",
    b"#",
    b"$share/",
    b"$",
    b"\x00",
    b"\x1f",
    b"\x7f",
    b"\xc2\x85",
    b"\xc3\xa9",
    b"\xef\xbb\xbf",
    b"\xef\xbf\xbe",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x98\x80",
    b"\xf4\x90\x80\x80",
    b"\xff",
    b"\xe9",
    b"\x80",
]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from(_PIECES), max_size=8).map(b"".join),
    strict=st.booleans(),
)
def test_validation_equals_reference(data: bytes, strict: bool) -> None:
    got_topic = _code(radix.validate_topic, data, strict)
    got_filter = _code(radix.validate_filter, data, strict)
    assert (got_topic.name if got_topic else None) == topic_error(data, strict)
    assert (got_filter.name if got_filter else None) == filter_error(data, strict)

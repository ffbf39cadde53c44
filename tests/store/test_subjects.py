"""NATS subject rules checked against brute force over a small token alphabet."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from store.subjects import (
    is_valid_name,
    is_valid_subject,
    matcher,
    subject_matches,
    subjects_overlap,
    subset_of,
)

TOKENS = ["a", "b"]
LITERALS = [
    ".".join(p) for n in range(1, 4) for p in itertools.product(TOKENS, repeat=n)
]  # every literal subject of 1..3 tokens

_pattern = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=3).flatmap(
    lambda toks: st.sampled_from([".".join(toks), ".".join([*toks[:-1], ">"])])
)


def _brute_match(pattern: str, subject: str) -> bool:
    p = pattern.split(".")
    s = subject.split(".")
    if p[-1] == ">":
        if len(s) < len(p):
            return False
        s = s[: len(p) - 1]
        p = p[:-1]
    elif len(s) != len(p):
        return False
    return all(x in ("*", y) for x, y in zip(p, s, strict=True))


@settings(max_examples=200, deadline=None)
@given(pattern=_pattern, subject=st.sampled_from(LITERALS))
def test_match_equals_brute_force(pattern: str, subject: str) -> None:
    assert subject_matches(pattern, subject) == _brute_match(pattern, subject)


@settings(max_examples=200, deadline=None)
@given(a=_pattern, b=_pattern)
def test_overlap_and_subset_equal_brute_force(a: str, b: str) -> None:
    # Within 1..3 tokens the alphabet is exhaustive except for '>' reaching further,
    # which only adds subjects both or neither match beyond what 3 tokens show.
    ma = {s for s in LITERALS if _brute_match(a, s)}
    mb = {s for s in LITERALS if _brute_match(b, s)}
    assert subjects_overlap(a, b) == bool(ma & mb)
    if subset_of(a, b):
        assert ma <= mb


def test_validity() -> None:
    assert is_valid_subject("a.b.>")
    assert is_valid_subject("$MQTT.sess.x")
    assert not is_valid_subject("a.>.b")
    assert not is_valid_subject("a..b")
    assert not is_valid_subject(".a")
    assert not is_valid_subject("a b")
    assert not is_valid_subject("a.*", wildcards=False)
    assert is_valid_subject("a*.b", wildcards=False)  # not a wildcard token
    assert is_valid_name("ORDERS")
    for bad in ("", "a.b", "a*", "a>", "a/b", "a\\b", "a b", "x" * 256):
        assert not is_valid_name(bad)


def _valid_by_tokens(subject: str, wildcards: bool) -> bool:
    """The validity rule spelled out token by token (the model for the fast check)."""
    if not subject or any(c in " \t\r\n\f\x00" for c in subject):
        return False
    tokens = subject.split(".")
    for i, tok in enumerate(tokens):
        if not tok:
            return False
        if tok in ("*", ">") and (not wildcards or (tok == ">" and i != len(tokens) - 1)):
            return False
    return True


@settings(max_examples=500)
@given(
    st.lists(st.sampled_from(["a", "*", ">", "", "a*", "b>", " ", "\t", "\x00", "\r"]), max_size=5),
    st.booleans(),
)
def test_is_valid_subject_equals_token_rule(parts: list[str], wildcards: bool) -> None:
    for subject in (".".join(parts), "".join(parts)):
        assert is_valid_subject(subject, wildcards=wildcards) == _valid_by_tokens(
            subject, wildcards
        )


LONG_LITERALS = [
    ".".join(p) for n in range(1, 4) for p in itertools.product(["a", "ab", "ba"], repeat=n)
]


@settings(max_examples=300, deadline=None)
@given(
    head=st.lists(st.sampled_from(["a", "ab", "ba", "*"]), max_size=2),
    subject=st.sampled_from(LONG_LITERALS),
)
def test_tail_wildcard_match_equals_brute_force_with_longer_tokens(
    head: list[str], subject: str
) -> None:
    # "a.ab.>" takes a prefix fast path: tokens that are prefixes of each other must not
    # match ("ab.>" never matches "aba.x"), and ">" needs at least one more token.
    pattern = ".".join([*head, ">"])
    assert subject_matches(pattern, subject) == _brute_match(pattern, subject)


@settings(max_examples=300, deadline=None)
@given(
    filters=st.lists(
        st.lists(st.sampled_from(["a", "ab", "*"]), max_size=2).flatmap(
            lambda head: st.sampled_from([".".join([*head, ">"]), ".".join(head) or "a"])
        ),
        min_size=1,
        max_size=2,
    ),
    subject=st.sampled_from(LONG_LITERALS),
)
def test_matcher_equals_brute_force(filters: list[str], subject: str) -> None:
    """The compiled form a stream builds once per config (one ``prefix.>`` filter takes a
    ``startswith``) matches exactly what the filters match."""
    want = any(_brute_match(f, subject) for f in filters)
    assert matcher(tuple(filters))(subject) == want


@settings(max_examples=300, deadline=None)
@given(
    filters=st.lists(
        st.lists(st.sampled_from(["a", "$(", "*", "+"]), min_size=1, max_size=3).flatmap(
            lambda toks: st.sampled_from([".".join(toks), ".".join([*toks[:-1], ">"])])
        ),
        min_size=1,
        max_size=3,
    ),
    subject=st.lists(st.sampled_from(["a", "$(", "+", "b"]), min_size=1, max_size=4).map(".".join),
)
def test_matcher_of_any_filters_equals_token_matching(filters: list[str], subject: str) -> None:
    """Filters other than one ``prefix.>`` compile to a regular expression (consumers walk
    records with it): tokens that mean something to a regular expression stay literal."""
    assert matcher(tuple(filters))(subject) == any(subject_matches(f, subject) for f in filters)

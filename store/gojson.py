"""Request bodies as nats-server's Go JSON decoding sees them.

nats-server 2.15.1 decodes a stream or consumer config with ``encoding/json`` and unknown
fields disallowed, so before any rule of its own a body can fail on its shape: a field it
does not know, a value of the wrong JSON kind, a number that does not fit the field's Go
type. Each is 400/10025 "invalid JSON: ..." with Go's words (measured against the
server; see tests/store/test_against_nats.py). This module holds the Go type of every
field the server knows and turns the first such problem, in document order as Go meets
it, into that error. What it does not judge (policy names, subjects, limits) is left to
the pydantic models and their ``normalized`` rules.

Go's rules copied here: ``null`` leaves a plain field as it was (the field is dropped
from the body: the model's default applies); the policy enums decode through their own
``UnmarshalJSON`` and refuse ``null`` and every other non-name with ``can not unmarshal
"<json>"``; a ``null`` element of a ``[]string`` is ``""`` and of a duration list ``0``;
a number that does not fit is named with its literal (``number 1.5``, ``number -1``);
a value of the wrong kind by the kind alone (``string``, ``bool``, ``array``...).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from store.errors import JetStreamError, js_error

ZERO_TIME: Final = "0001-01-01T00:00:00Z"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_TIME_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
_RFC3339: Final = "2006-01-02T15:04:05Z07:00"
# Go's time.Parse of RFC 3339 meets the layout as these elements, each with what it reads.
_RFC3339_ELEMS: Final = (
    ("2006", r"\d{4}"),
    ("-", "-"),
    ("01", r"\d\d"),
    ("-", "-"),
    ("02", r"\d\d"),
    ("T", "T"),
    ("15", r"\d\d"),
    (":", ":"),
    ("04", r"\d\d"),
    (":", ":"),
    ("05", r"\d\d"),
)


def parse_time(text: str) -> int:
    """Parse an RFC 3339 time to Unix nanoseconds (zero time -> 0); ValueError if malformed."""
    if text == ZERO_TIME:
        return 0
    m = _TIME_RE.match(text)
    if m is None:
        raise ValueError(f"invalid time {text!r}")
    base, frac, tz = m.groups()
    tzs = "+00:00" if tz == "Z" else tz
    dt = _dt.datetime.fromisoformat(base + tzs)
    return int(dt.timestamp()) * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


def go_time_text(text: str) -> str:
    """A valid RFC 3339 time as Go writes it back once parsed (``time.Time`` in JSON):
    the fraction without trailing zeros (nor its dot when nothing is left), a zero offset
    as ``Z``; the instant and any other offset as given."""
    m = _TIME_RE.match(text)
    if m is None:
        return text
    base, frac, tz = m.groups()
    frac = (frac or "").rstrip("0")
    if tz in ("+00:00", "-00:00"):
        tz = "Z"
    return f"{base}.{frac}{tz}" if frac else base + tz


def time_error(text: str) -> str:
    """Go's words for an RFC 3339 time it cannot parse: the first layout element the
    value does not match, and the value from there on (after the seconds: the rest)."""
    rest, done = text, 0
    for elem, pattern in _RFC3339_ELEMS:
        m = re.match(pattern, rest)
        if m is None:
            break
        rest, done = rest[m.end() :], done + len(elem)
    else:
        elem = _RFC3339[done:]
    return (
        f"parsing time {json.dumps(text)} as {json.dumps(_RFC3339)}:"
        f" cannot parse {json.dumps(rest)} as {json.dumps(elem)}"
    )


class GoFloat(float):
    """A JSON number read with a fraction or exponent, keeping its literal (``1e3``)."""

    literal: str

    def __new__(cls, text: str) -> GoFloat:
        value = super().__new__(cls, text)
        value.literal = text
        return value


def loads(body: str | bytes) -> Any:
    """``json.loads`` keeping the literal of non-integer numbers (for Go's error words)."""
    return json.loads(body, parse_float=GoFloat)


@dataclass(frozen=True, slots=True)
class GoInt:
    """An integer field: its Go type's name and range."""

    name: str
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class GoKind:
    """A field decoded by kind alone: ``bool``, ``string``, ``time.Time`` (a string that
    must parse as RFC 3339, Go's words if not), or a struct this store takes as an
    opaque object."""

    name: str
    kind: type


@dataclass(frozen=True, slots=True)
class GoList:
    name: str
    item: GoInt | GoKind


@dataclass(frozen=True, slots=True)
class GoMap:
    name: str
    value: GoKind


@dataclass(frozen=True, slots=True)
class GoStruct:
    name: str
    fields: dict[str, GoType]


@dataclass(frozen=True, slots=True)
class GoEnum:
    """A field with its own ``UnmarshalJSON`` (policies, compression, priority policy).
    A string goes on to the model, which names an unknown one; anything else, ``null``
    included, is refused here with the field's own words (``{json}``: the value's JSON,
    ``{quoted}``: that JSON quoted as Go's ``%q``, ``{kind}``: its kind)."""

    words: str
    null_words: str | None = None  # when ``null`` has other words


GoType = GoInt | GoKind | GoList | GoMap | GoStruct | GoEnum

INT = GoInt("int", -(1 << 63), (1 << 63) - 1)  # Go's int on 64-bit platforms
INT64 = GoInt("int64", -(1 << 63), (1 << 63) - 1)
INT32 = GoInt("int32", -(1 << 31), (1 << 31) - 1)
UINT64 = GoInt("uint64", 0, (1 << 64) - 1)
DURATION = GoInt("time.Duration", -(1 << 63), (1 << 63) - 1)
BOOL = GoKind("bool", bool)
STRING = GoKind("string", str)
TIME = GoKind("time.Time", str)
POLICY = GoEnum("can not unmarshal {quoted}")


def _obj(name: str) -> GoKind:
    return GoKind(name, dict)


STREAM_CONSUMER_LIMITS: Final = GoStruct(
    "server.StreamConsumerLimits", {"inactive_threshold": DURATION, "max_ack_pending": INT}
)

# Every field of nats-server 2.15.1's StreamConfigRequest (read off the server: each name
# it does not answer "unknown field" for), with its Go type (its own error words).
STREAM_FIELDS: Final[dict[str, GoType]] = {
    "name": STRING,
    "description": STRING,
    "subjects": GoList("[]string", STRING),
    "retention": POLICY,
    "max_consumers": INT,
    "max_msgs": INT64,
    "max_bytes": INT64,
    "max_age": DURATION,
    "max_msgs_per_subject": INT64,
    "max_msg_size": INT32,
    "discard": POLICY,
    "storage": POLICY,
    "num_replicas": INT,
    "no_ack": BOOL,
    "duplicate_window": DURATION,
    "placement": _obj("server.Placement"),
    "mirror": _obj("server.StreamSource"),
    "sources": GoList("[]*server.StreamSource", _obj("server.StreamSource")),
    "compression": GoEnum(
        "json: cannot unmarshal {kind} into Go value of type string",
        null_words="unknown compression algorithm",
    ),
    "first_seq": UINT64,
    "subject_transform": _obj("server.SubjectTransformConfig"),
    "republish": _obj("server.RePublish"),
    "allow_direct": BOOL,
    "mirror_direct": BOOL,
    "sealed": BOOL,
    "deny_delete": BOOL,
    "deny_purge": BOOL,
    "allow_rollup_hdrs": BOOL,
    "discard_new_per_subject": BOOL,
    "consumer_limits": STREAM_CONSUMER_LIMITS,
    "allow_msg_ttl": BOOL,
    "subject_delete_marker_ttl": DURATION,
    "allow_msg_counter": BOOL,
    "allow_atomic": BOOL,
    "allow_msg_schedules": BOOL,
    "allow_batched": BOOL,
    "persist_mode": POLICY,
    "metadata": GoMap("map[string]string", STRING),
    "pedantic": BOOL,
}

# The same for ConsumerConfig (the "config" of CreateConsumerRequest).
CONSUMER_FIELDS: Final[dict[str, GoType]] = {
    "durable_name": STRING,
    "name": STRING,
    "description": STRING,
    "deliver_policy": POLICY,
    "opt_start_seq": UINT64,
    "opt_start_time": TIME,
    "ack_policy": POLICY,
    "ack_wait": DURATION,
    "max_deliver": INT,
    "backoff": GoList("[]time.Duration", DURATION),
    "filter_subject": STRING,
    "filter_subjects": GoList("[]string", STRING),
    "replay_policy": POLICY,
    "rate_limit_bps": UINT64,
    "sample_freq": STRING,
    "max_waiting": INT,
    "max_ack_pending": INT,
    "headers_only": BOOL,
    "max_batch": INT,
    "max_expires": DURATION,
    "max_bytes": INT,
    "inactive_threshold": DURATION,
    "num_replicas": INT,
    "mem_storage": BOOL,
    "metadata": GoMap("map[string]string", STRING),
    "deliver_subject": STRING,
    "deliver_group": STRING,
    "idle_heartbeat": DURATION,
    "flow_control": BOOL,
    "direct": BOOL,
    "sourcing": BOOL,
    "pause_until": TIME,
    "priority_groups": GoList("[]string", STRING),
    "priority_policy": GoEnum("unknown priority policy: {json}"),
    "priority_timeout": DURATION,
}

STREAM_REQUEST: Final = "StreamConfigRequest"
CONSUMER_REQUEST: Final = "CreateConsumerRequest.config"


def check_body(data: dict[str, Any], fields: dict[str, GoType], where: str) -> dict[str, Any]:
    """``data`` as the server decodes it into the struct ``fields`` at ``where``: raise
    its 10025 error for the first problem; otherwise the body without its ``null`` fields
    (and ``null`` list elements as the Go zero value)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        go = fields.get(key)
        if go is None:
            raise _fail(f"json: unknown field {json.dumps(key)}")
        if isinstance(go, GoEnum):
            if not isinstance(value, str):
                raise _fail(_enum_words(go, value))
            out[key] = _text(value)
        elif value is not None:  # null: Go leaves the field as it was
            out[key] = _value(value, go, f"{where}.{key}", field=True)
    return out


def _text(value: str) -> str:
    """A string as Go decodes it: a lone UTF-16 surrogate escape (``"\\ud800"``) is
    U+FFFD (a Python string would keep it, and it has no UTF-8)."""
    return value if value.isascii() else _LONE_SURROGATE.sub("\ufffd", value)


def _texts(value: Any) -> Any:
    """``_text`` through an object this module does not look into."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list):
        return [_texts(v) for v in value]
    if isinstance(value, dict):
        return {_text(k): _texts(v) for k, v in value.items()}
    return value


def check_uint64(value: int | None, path: str) -> None:
    """A ``uint64`` request field (a sequence, a count) given as a Python int: the
    server's 10025 words if it is negative or too large (``path``: Go's struct.field);
    ``None`` is no value; another Python type is a TypeError."""
    if value is None:
        return
    if type(value) is not int:  # a caller's bug, not a request's shape
        raise TypeError(f"{path} must be an int, not {type(value).__name__}")
    if not UINT64.lo <= value <= UINT64.hi:
        raise _mismatch(value, path, UINT64.name, field=True)


def _fail(err: str) -> JetStreamError:
    return js_error("invalid_json", err=err)


def _enum_words(go: GoEnum, value: object) -> str:
    if value is None and go.null_words is not None:
        return go.null_words
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return go.words.format(json=text, quoted=json.dumps(text), kind=_kind(value))


def _kind(value: object) -> str:
    """Go's name for a JSON value's kind in a type error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _mismatch(value: object, path: str, go: str, *, field: bool) -> JetStreamError:
    if isinstance(value, int | float) and not isinstance(value, bool) and go in _INT_NAMES:
        what = f"number {value.literal if isinstance(value, GoFloat) else json.dumps(value)}"
    else:
        what = _kind(value)
    into = f"Go struct field {path}" if field else path
    return _fail(f"json: cannot unmarshal {what} into {into} of type {go}")


def _zero(go: GoInt | GoKind) -> object:
    """A ``null`` list element: the element type's zero value (nil for a pointer)."""
    if isinstance(go, GoInt):
        return 0
    return "" if go.kind is str else None


def _value(value: Any, go: GoType, path: str, *, field: bool) -> Any:
    """One non-null value of type ``go`` (``field``: a struct field or map value, which
    Go's words call "Go struct field"; otherwise a list element)."""
    if isinstance(go, GoInt):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or isinstance(value, float)
            or not go.lo <= value <= go.hi
        ):
            raise _mismatch(value, path, go.name, field=field)
        return value
    if isinstance(go, GoKind):
        ok = isinstance(value, go.kind) and (go.kind is bool or not isinstance(value, bool))
        if not ok:
            raise _mismatch(value, path, go.name, field=field)
        if go is TIME:
            try:
                parse_time(value)
            except ValueError:
                raise _fail(time_error(_text(value))) from None
            return go_time_text(value)
        return _texts(value)
    if isinstance(go, GoList):
        if not isinstance(value, list):
            raise _mismatch(value, path, go.name, field=field)
        item = go.item
        return [
            _zero(item) if v is None else _value(v, item, f"{path}.{i}", field=False)
            for i, v in enumerate(value)
        ]
    if isinstance(go, GoMap):
        if not isinstance(value, dict):
            raise _mismatch(value, path, go.name, field=field)
        return {
            _text(k): "" if v is None else _value(v, go.value, f"{path}.{k}", field=True)
            for k, v in value.items()
        }
    if isinstance(go, GoStruct):
        if not isinstance(value, dict):
            raise _mismatch(value, path, go.name, field=field)
        return check_body(value, go.fields, path)
    raise _fail(_enum_words(go, value))  # an enum inside a list or map (none today)


_INT_NAMES: Final = frozenset(t.name for t in (INT, INT64, INT32, UINT64, DURATION))

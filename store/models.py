"""Wire-shaped pydantic models: StreamConfig/State/Info and ConsumerConfig/Info (spec §1.4-1.7).

``to_wire()`` gives exactly the JSON object nats-server sends (omitempty fields are left
out); ``from_wire()`` validates a request body and raises :class:`JetStreamError` with the
JetStream ``err_code`` on bad input. Durations are integer nanoseconds; times are RFC 3339
strings with nanoseconds (``0001-01-01T00:00:00Z`` is the zero time).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from store import gojson
from store.errors import JetStreamError, js_error
from store.gojson import ZERO_TIME
from store.gojson import parse_time as parse_time  # re-exported beside format_time

SECOND = 1_000_000_000
MIN_DURATION = 100_000_000  # 100 ms: smallest max_age / duplicate_window / heartbeat
MAX_NAME_LEN = 255  # stream names, as nats-server
MAX_DESCRIPTION_LEN = 4096
DEFAULT_DUPLICATE_WINDOW = 120 * SECOND
DEFAULT_ACK_WAIT = 30 * SECOND
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_EPHEMERAL_INACTIVE = 5 * SECOND


def format_time(ns: int) -> str:
    """RFC 3339 UTC with nanoseconds (trailing zeros trimmed, as Go does)."""
    if ns <= 0:
        return ZERO_TIME
    secs, frac = divmod(ns, SECOND)
    base = _dt.datetime.fromtimestamp(secs, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        return f"{base}.{frac:09d}".rstrip("0") + "Z"
    return base + "Z"


def go_duration(ns: int) -> str:
    """``ns`` as Go's ``time.Duration`` prints it (nats-server's status texts): 2s, 1m30s,
    1h0m0s, 1.5s, 100ms, 250µs."""
    if ns == 0:
        return "0s"
    sign, u = ("-", -ns) if ns < 0 else ("", ns)
    if u < 1_000:
        return f"{sign}{u}ns"
    if u < 1_000_000:
        return f"{sign}{_decimal(u, 1_000)}µs"
    if u < 1_000_000_000:
        return f"{sign}{_decimal(u, 1_000_000)}ms"
    hours, rest = divmod(u, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    out = f"{_decimal(rest, 1_000_000_000)}s"
    if hours or minutes:
        out = f"{minutes}m{out}"
    if hours:
        out = f"{hours}h{out}"
    return sign + out


def _decimal(value: int, unit: int) -> str:
    whole, part = divmod(value, unit)
    if not part:
        return str(whole)
    return f"{whole}.{str(part).rjust(len(str(unit)) - 1, '0').rstrip('0')}"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)
    # A request body's Go struct (store.gojson): its fields and its name in Go's errors.
    _go_fields: ClassVar[dict[str, gojson.GoType] | None] = None
    _go_where: ClassVar[str] = ""

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self) -> bytes:
        return json.dumps(self.to_wire(), separators=(",", ":"), sort_keys=False).encode()

    @classmethod
    def _parse(cls, body: dict[str, Any] | str | bytes, error: str) -> Self:
        try:
            if isinstance(body, str | bytes):
                data = gojson.loads(body) if body else {}
            else:
                data = body
        except ValueError as exc:
            raise js_error("invalid_json", err=str(exc)) from None
        if not isinstance(data, dict):
            raise js_error("invalid_json", err="expected a JSON object")
        if cls._go_fields is not None:
            data = gojson.check_body(data, cls._go_fields, cls._go_where)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            if first["type"] == "literal_error" and loc == "compression":
                raise js_error("invalid_json", err="unknown compression algorithm") from None
            if first["type"] == "literal_error" and loc == "priority_policy":
                quoted = json.dumps(first["input"])
                raise js_error("invalid_json", err=f"unknown priority policy: {quoted}") from None
            if first["type"] == "literal_error":
                # An unknown policy name: nats-server's JSON decoding error, word for word.
                quoted = json.dumps(first["input"]).replace('"', '\\"')
                raise js_error("invalid_json", err=f'can not unmarshal "{quoted}"') from None
            raise js_error(error, err=f"{loc}: {first['msg']}") from None


Retention = Literal["limits", "interest", "workqueue"]
Storage = Literal["file", "memory"]
Discard = Literal["old", "new"]
AckPolicy = Literal["none", "all", "explicit"]
DeliverPolicy = Literal[
    "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
]
ReplayPolicy = Literal["instant", "original"]


class ConsumerLimits(_Wire):
    inactive_threshold: int | None = None
    max_ack_pending: int | None = None


class StreamConfig(_Wire):
    """A stream configuration; :meth:`normalized` fills defaults and validates (spec §1.4)."""

    name: str
    description: str | None = None
    subjects: list[str] = Field(default_factory=list)
    retention: Retention = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: Discard = "old"
    storage: Storage = "file"
    num_replicas: int = 1
    duplicate_window: int = 0
    compression: Literal["none", "s2"] = "none"
    allow_direct: bool = False
    mirror_direct: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = Field(default_factory=ConsumerLimits)
    allow_msg_ttl: bool = False
    discard_new_per_subject: bool | None = None
    no_ack: bool | None = None
    first_seq: int | None = None
    metadata: dict[str, str] | None = None
    mirror: dict[str, Any] | None = None
    sources: list[dict[str, Any] | None] | None = None
    placement: dict[str, Any] | None = None  # echoed (one server: nothing to place)
    persist_mode: Literal["default", "async"] | None = None  # "async": echoed, synced anyway
    # Known to nats-server 2.15.1, not done here: refused when set (normalized).
    republish: dict[str, Any] | None = None
    subject_transform: dict[str, Any] | None = None
    subject_delete_marker_ttl: int | None = None
    allow_msg_counter: bool | None = None
    allow_atomic: bool | None = None
    allow_msg_schedules: bool | None = None
    allow_batched: bool | None = None
    pedantic: bool | None = None  # a request flag, never echoed

    _go_fields = gojson.STREAM_FIELDS
    _go_where = gojson.STREAM_REQUEST

    @classmethod
    def from_wire(cls, body: dict[str, Any] | str | bytes) -> StreamConfig:
        return cls._parse(body, "stream_invalid_config").normalized()

    def normalized(self) -> StreamConfig:
        """Defaults filled, every rule of spec §1.4 checked (raises JetStreamError)."""
        from store.subjects import is_valid_name, is_valid_subject, subjects_overlap

        def bad(msg: str) -> JetStreamError:
            return js_error("stream_invalid_config", err=msg)

        # Checks, codes and words as nats-server 2.15.1 answers (measured), except where
        # a feature is refused rather than faked (mirrors, sources, per-message TTL and
        # the features listed below).
        if "/" in self.name or "\\" in self.name:
            raise js_error("stream_name_path_separators")
        if len(self.name) > MAX_NAME_LEN:
            raise bad(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
        if not is_valid_name(self.name):
            raise bad("invalid stream name")
        if self.description is not None and len(self.description) > MAX_DESCRIPTION_LEN:
            raise bad(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
        if self.mirror_direct and self.mirror is None:
            raise bad("stream has no mirror but does have mirror direct")
        if self.mirror is not None or self.sources:
            raise bad("mirrors and sources are not supported")
        if self.allow_msg_ttl or self.subject_delete_marker_ttl:
            raise bad("per-message TTL is not supported")
        for what, is_set in (
            ("republish is", self.republish is not None),
            ("subject transforms are", self.subject_transform is not None),
            ("message counters are", self.allow_msg_counter),
            ("atomic batch publish is", self.allow_atomic),
            ("fast batch publish is", self.allow_batched),
            ("message schedules are", self.allow_msg_schedules),
            ("pedantic mode is", self.pedantic),
        ):
            if is_set:
                raise bad(f"{what} not supported")
        if self.num_replicas > 1:
            raise js_error("stream_replicas_not_supported")
        if self.num_replicas < 0:
            raise js_error("replicas_negative")
        upd: dict[str, Any] = {"num_replicas": 1}
        for off in _STREAM_OFF_FIELDS:  # false / default: not echoed, as the server
            upd[off] = None
        if self.persist_mode == "default":
            upd["persist_mode"] = None
        for field in (
            "max_consumers",
            "max_msgs",
            "max_bytes",
            "max_msgs_per_subject",
            "max_msg_size",
        ):
            if getattr(self, field) == 0 or getattr(self, field) < -1:
                upd[field] = -1  # no limit (nats-server reads any negative so)
        if self.max_age < 0:
            raise bad("max age can not be negative")
        if 0 < self.max_age < MIN_DURATION:
            raise bad("max age needs to be >= 100ms")
        dw = self.duplicate_window
        if dw < 0:
            raise bad("duplicates window can not be negative")
        if dw == 0:
            dw = DEFAULT_DUPLICATE_WINDOW
            if 0 < self.max_age < dw:
                dw = self.max_age
        elif dw < MIN_DURATION:
            raise bad("duplicates window needs to be >= 100ms")
        elif self.max_age and dw > self.max_age:
            raise bad("duplicates window can not be larger then max age")
        upd["duplicate_window"] = dw
        subjects = list(self.subjects) or [self.name]
        valid = [s for s in subjects if is_valid_subject(s)]
        for i, a in enumerate(valid):  # overlaps first, valid subjects only (as the server)
            for b in valid[i + 1 :]:
                if subjects_overlap(a, b):
                    raise bad(f'subject "{a}" overlaps with "{b}"')
        for s in subjects:
            if not is_valid_subject(s):
                raise bad("invalid subject")
            if s == ">" and not self.no_ack:
                raise bad("capturing all subjects requires no-ack to be true")
            for reserved in ("$JS.>", "$JSC.>", "$NRG.>", "$SYS.>"):
                if subjects_overlap(s, reserved) and not self.no_ack:
                    if s.startswith(("$JS.EVENT.", "$SYS.ACCOUNT.")):
                        continue
                    raise bad("subjects that overlap with jetstream api require no-ack to be true")
        upd["subjects"] = subjects
        if self.discard_new_per_subject:
            mmps = upd.get("max_msgs_per_subject", self.max_msgs_per_subject)
            if self.discard != "new":
                raise bad("discard new per subject requires discard new policy to be set")
            if mmps <= 0:
                raise bad("discard new per subject requires max msgs per subject > 0")
        if self.allow_rollup_hdrs and self.deny_purge:
            raise bad("roll-ups require the purge permission")
        if self.first_seq is not None and self.first_seq < 0:
            raise js_error(  # nats-server's JSON decoding of a uint64, word for word
                "invalid_json",
                err=f"json: cannot unmarshal number {self.first_seq} into Go struct field"
                " StreamConfigRequest.first_seq of type uint64",
            )
        return self.model_copy(update=upd)


_STREAM_OFF_FIELDS = (
    "subject_delete_marker_ttl",
    "allow_msg_counter",
    "allow_atomic",
    "allow_msg_schedules",
    "allow_batched",
    "pedantic",
)


class StreamState(_Wire):
    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    first_ts: str = ZERO_TIME
    last_seq: int = 0
    last_ts: str = ZERO_TIME
    num_subjects: int | None = None
    subjects: dict[str, int] | None = None
    num_deleted: int | None = None
    deleted: list[int] | None = None
    consumer_count: int = 0


class ClusterInfo(_Wire):
    leader: str


class StreamInfo(_Wire):
    config: StreamConfig
    created: str
    state: StreamState
    cluster: ClusterInfo | None = None
    ts: str


class ConsumerConfig(_Wire):
    """A consumer configuration; :meth:`normalized` fills defaults (spec §1.6)."""

    durable_name: str | None = None
    name: str | None = None
    description: str | None = None
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: int | None = None
    opt_start_time: str | None = None
    ack_policy: AckPolicy = "none"
    ack_wait: int | None = None
    max_deliver: int = -1
    backoff: list[int] | None = None
    filter_subject: str | None = None
    filter_subjects: list[str] | None = None
    replay_policy: ReplayPolicy = "instant"
    rate_limit_bps: int | None = None
    sample_freq: str | None = None
    max_waiting: int | None = None
    max_ack_pending: int | None = None
    max_batch: int | None = None
    max_expires: int | None = None
    max_bytes: int | None = None
    deliver_subject: str | None = None
    deliver_group: str | None = None
    idle_heartbeat: int | None = None
    flow_control: bool | None = None
    headers_only: bool | None = None
    inactive_threshold: int | None = None
    num_replicas: int = 0
    mem_storage: bool | None = None
    metadata: dict[str, str] | None = None
    pause_until: str | None = None  # RFC 3339: paused until then (store.pausing)
    # Known to nats-server 2.15.1, not done here: refused when set (normalized).
    direct: bool | None = None
    sourcing: bool | None = None
    priority_groups: list[str] | None = None
    priority_policy: Literal["none", "overflow", "pinned_client", "prioritized"] | None = None
    priority_timeout: int | None = None

    _go_fields = gojson.CONSUMER_FIELDS
    _go_where = gojson.CONSUMER_REQUEST

    @classmethod
    def from_wire(cls, body: dict[str, Any] | str | bytes) -> ConsumerConfig:
        return cls._parse(body, "consumer_create")

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def filters(self) -> tuple[str, ...]:
        if self.filter_subjects:
            return tuple(self.filter_subjects)
        if self.filter_subject:
            return (self.filter_subject,)
        return ()

    @property
    def consumer_name(self) -> str | None:
        return self.name or self.durable_name

    def normalized(self, limits: ConsumerLimits | None = None) -> ConsumerConfig:
        """Defaults filled and field rules checked (stream-dependent rules live in the engine)."""
        from store.subjects import is_literal, is_valid_name, is_valid_subject, subjects_overlap

        def policy(msg: str) -> JetStreamError:
            return js_error("consumer_invalid_policy", err=msg)

        def create(msg: str) -> JetStreamError:
            return js_error("consumer_create", err=msg)

        upd: dict[str, Any] = {}
        for n in (self.durable_name, self.name):
            if n and ("/" in n or "\\" in n):
                raise js_error("consumer_name_path_separators")
        if self.durable_name and self.name and self.durable_name != self.name:
            raise js_error("durable_name_mismatch")
        for n in (self.durable_name, self.name):
            if n is not None and not is_valid_name(n):
                raise create("consumer name is not valid")
        if self.durable_name and not self.name:
            upd["name"] = self.durable_name
        dp = self.deliver_policy
        if self.opt_start_seq is not None and dp != "by_start_sequence":
            raise policy(
                f"consumer delivery policy is deliver {_policy_words(dp)}, but optional start sequence is also set"
            )
        if self.opt_start_time is not None and dp != "by_start_time":
            raise policy(
                f"consumer delivery policy is deliver {_policy_words(dp)}, but optional start time is also set"
            )
        if dp == "by_start_sequence" and not self.opt_start_seq:
            raise policy(
                "consumer delivery policy is deliver by start sequence, but optional start sequence is not set"
            )
        if dp == "by_start_time":
            if self.opt_start_time is None:
                raise policy(
                    "consumer delivery policy is deliver by start time, but optional start time is not set"
                )
            try:
                parse_time(self.opt_start_time)
            except ValueError:
                raise policy("optional start time is not a valid time") from None
        # Codes and words as nats-server 2.15.1 answers (measured).
        if self.filter_subject and self.filter_subjects:
            raise js_error("consumer_filter_and_filters")
        filters = self.filters
        for f in filters:
            if not is_valid_subject(f):
                raise js_error("stream_invalid_config", err="invalid subject")
        for i, a in enumerate(filters):
            for b in filters[i + 1 :]:
                if subjects_overlap(a, b):
                    raise js_error("consumer_filters_overlap")
        if dp == "last_per_subject" and not filters:
            raise policy(
                "consumer delivery policy is deliver last per subject, but optional filter subject is not set"
            )
        if self.ack_wait is not None and self.ack_wait < 0:
            raise js_error("consumer_ack_wait_negative")
        if self.num_replicas < 0:
            raise js_error("replicas_negative")
        if self.ack_policy != "none":
            if self.ack_wait is None or self.ack_wait <= 0:
                upd["ack_wait"] = DEFAULT_ACK_WAIT
            if self.max_ack_pending is None or self.max_ack_pending == 0:
                mp = limits.max_ack_pending if limits and limits.max_ack_pending else None
                upd["max_ack_pending"] = mp or DEFAULT_MAX_ACK_PENDING
        elif self.ack_wait is None or self.ack_wait <= 0:
            upd["ack_wait"] = DEFAULT_ACK_WAIT
        if self.max_deliver == 0 or self.max_deliver < -1:
            upd["max_deliver"] = -1
        md = upd.get("max_deliver", self.max_deliver)
        if self.backoff:
            if any(b < 0 for b in self.backoff):
                raise js_error("consumer_backoff_negative")
            if md != -1 and md <= len(self.backoff):
                raise js_error("max_deliver_backoff")
            upd["ack_wait"] = self.backoff[0] or None  # reported as the server does
        if self.deliver_subject:
            if not is_valid_subject(self.deliver_subject):
                raise create("deliver subject is not valid")
            if not is_literal(self.deliver_subject):
                raise js_error("deliver_subject_wildcards")
            if self.max_waiting and self.max_waiting > 0:  # below 0: dropped (below)
                raise js_error("push_max_waiting")
            if self.idle_heartbeat is not None and 0 < self.idle_heartbeat < MIN_DURATION:
                raise js_error("small_heartbeat")
        else:
            if self.idle_heartbeat:
                raise js_error("heartbeat_requires_push")
            if self.flow_control:
                raise js_error("fc_requires_push")
            if self.deliver_group:
                raise create("consumer deliver group requires a push based consumer")
            if not self.max_waiting:
                upd["max_waiting"] = DEFAULT_MAX_WAITING
        if self.inactive_threshold is not None and self.inactive_threshold < 0:
            upd["inactive_threshold"] = None  # as none (nats-server 2.15.1, measured)
        if not self.durable_name and not (self.inactive_threshold or 0) > 0:
            lim = limits.inactive_threshold if limits and limits.inactive_threshold else None
            upd["inactive_threshold"] = lim or DEFAULT_EPHEMERAL_INACTIVE
        if self.num_replicas > 1:
            raise create("replicas > 1 not supported in non-clustered mode")
        upd.update(self._limits_normalized())
        upd.update(self._extras_checked())
        return self.model_copy(update=upd)

    def _limits_normalized(self) -> dict[str, Any]:
        """Negative request limits as nats-server 2.15.1 reads them (measured): a pull
        consumer's ``max_waiting`` below 0 is the default, a push consumer's is dropped;
        ``max_batch``, ``max_expires``, ``max_bytes`` below 0 are no limit (dropped);
        ``max_ack_pending`` below -1 is -1; ``max_expires`` under 1 ms is refused."""
        upd: dict[str, Any] = {}
        if self.max_waiting is not None and self.max_waiting < 0:
            upd["max_waiting"] = None if self.deliver_subject else DEFAULT_MAX_WAITING
        for field in ("max_batch", "max_expires", "max_bytes"):
            value = getattr(self, field)
            if value is not None and value < 0:
                upd[field] = None
        if self.max_expires is not None and 0 < self.max_expires < MIN_MAX_EXPIRES:
            raise js_error("consumer_max_expires_too_small")
        if self.max_ack_pending is not None and self.max_ack_pending < -1:
            upd["max_ack_pending"] = -1
        return upd

    def _extras_checked(self) -> dict[str, Any]:
        """Sampling, rate limit, direct, sourcing, priority groups and pause: the server's
        refusals, then what this store does not do (refused, not faked)."""

        def unsupported(what: str) -> JetStreamError:
            return js_error("consumer_create", err=f"{what} not supported")

        upd: dict[str, Any] = {}
        if self.sample_freq:
            digits = self.sample_freq.removesuffix("%")
            if not _ATOI.match(digits):
                raise js_error(
                    "consumer_invalid_sampling",
                    err=f"strconv.Atoi: parsing {json.dumps(digits)}: invalid syntax",
                )
            if not -(1 << 63) <= int(digits) < 1 << 63:
                raise js_error(
                    "consumer_invalid_sampling",
                    err=f"strconv.Atoi: parsing {json.dumps(digits)}: value out of range",
                )
            if int(digits) < 0:
                raise js_error("consumer_invalid_sampling", err="<nil>")
        if self.rate_limit_bps and not self.deliver_subject:
            raise js_error("consumer_pull_rate_limit")
        if self.direct:
            if not self.deliver_subject:
                raise js_error("consumer_direct_requires_push")
            if self.durable_name:
                raise js_error("consumer_direct_requires_ephemeral")
            raise unsupported("direct consumers are")
        if self.sourcing:
            raise unsupported("sourcing consumers are")
        policy = self.priority_policy or "none"
        if policy == "none":
            if self.priority_groups:
                raise js_error("consumer_priority_groups_without_policy")
            if self.priority_timeout:
                raise js_error("consumer_pinned_ttl_without_policy")
        elif not self.priority_groups:
            raise js_error("consumer_priority_policy_without_groups")
        else:
            raise unsupported("priority groups are")
        upd["priority_policy"] = upd["priority_groups"] = upd["priority_timeout"] = None
        upd["direct"] = upd["sourcing"] = None
        if self.pause_until is not None:
            try:  # (a wire body's time was parsed by gojson; a Python-built one may not be)
                paused = parse_time(self.pause_until)
            except ValueError:
                raise js_error("invalid_json", err=gojson.time_error(self.pause_until)) from None
            if paused < 0:  # (before 1970: no pause, echoed as the zero time)
                upd["pause_until"] = gojson.ZERO_TIME
        return upd


_ATOI = re.compile(r"^[+-]?[0-9]+$")
MIN_MAX_EXPIRES = 1_000_000  # 1 ms


def _policy_words(dp: str) -> str:
    return dp.replace("_", " ")


class SequenceInfo(_Wire):
    consumer_seq: int
    stream_seq: int
    last_active: str | None = None


class ConsumerInfo(_Wire):
    stream_name: str
    name: str
    created: str
    config: ConsumerConfig
    delivered: SequenceInfo
    ack_floor: SequenceInfo
    num_ack_pending: int
    num_redelivered: int
    num_waiting: int
    num_pending: int
    push_bound: bool | None = None
    paused: bool | None = None
    pause_remaining: int | None = None
    ts: str

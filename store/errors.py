"""JetStream API errors as data (spec/jetstream.md §1.3), defined once.

Every error the engine raises is a :class:`JetStreamError` built from this table, so it
carries exactly what goes on the wire: ``{"code", "err_code", "description"}``.
Descriptions ending in ``{...}`` placeholders are formatted by :func:`js_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    err_code: int
    code: int
    description: str


ERRORS: Final[dict[str, ErrorSpec]] = {
    "bad_request": ErrorSpec(10003, 400, "bad request"),
    "invalid_json": ErrorSpec(10025, 400, "invalid JSON: {err}"),
    "not_empty_request": ErrorSpec(10038, 400, "expected an empty request payload"),
    "stream_not_found": ErrorSpec(10059, 404, "stream not found"),
    "consumer_not_found": ErrorSpec(10014, 404, "consumer not found"),
    "no_message_found": ErrorSpec(10037, 404, "no message found"),
    "sequence_not_found": ErrorSpec(10043, 400, "sequence {seq} not found"),
    "stream_mismatch": ErrorSpec(10056, 400, "stream name in subject does not match request"),
    "stream_name_exist": ErrorSpec(
        10058, 400, "stream name already in use with a different configuration"
    ),
    "stream_subject_overlap": ErrorSpec(10065, 400, "subjects overlap with an existing stream"),
    "stream_invalid_config": ErrorSpec(10052, 500, "{err}"),
    "stream_update": ErrorSpec(10069, 500, "{err}"),
    "stream_replicas_not_supported": ErrorSpec(
        10074, 500, "replicas > 1 not supported in non-clustered mode"
    ),
    "stream_name_invalid": ErrorSpec(10052, 500, "{err}"),
    "message_exceeds_maximum": ErrorSpec(10054, 400, "message size exceeds maximum allowed"),
    "stream_not_match": ErrorSpec(10060, 400, "expected stream does not match"),
    "wrong_last_sequence": ErrorSpec(10071, 400, "wrong last sequence: {seq}"),
    "wrong_last_msg_id": ErrorSpec(10070, 400, "wrong last msg ID: {id}"),
    "store_failed": ErrorSpec(10077, 503, "{err}"),
    "rollup_failed": ErrorSpec(10111, 500, "{err}"),
    "stream_sealed": ErrorSpec(10109, 400, "invalid operation on sealed stream"),
    "purge_failed": ErrorSpec(10110, 500, "{err}"),
    "msg_delete_failed": ErrorSpec(10057, 500, "{err}"),
    "expected_subject_seq_required": ErrorSpec(
        10193, 400, "missing sequence for expected last sequence per subject"
    ),
    "atomic_publish_disabled": ErrorSpec(10174, 400, "atomic publish is disabled"),
    "counters_disabled": ErrorSpec(10168, 400, "message counters is disabled"),
    "schedules_disabled": ErrorSpec(10188, 400, "message schedules is disabled"),
    "msg_ttl_disabled": ErrorSpec(10166, 400, "per-message TTL is disabled"),
    "bad_header": ErrorSpec(10003, 400, "bad request: {err}"),
    "consumer_create": ErrorSpec(10012, 500, "{err}"),
    "consumer_name_exist": ErrorSpec(10013, 400, "consumer name already in use"),
    "consumer_already_exists": ErrorSpec(10148, 400, "consumer already exists"),
    "consumer_does_not_exist": ErrorSpec(10149, 400, "consumer does not exist"),
    "consumer_invalid_policy": ErrorSpec(10094, 400, "{err}"),
    "maximum_consumers": ErrorSpec(10026, 400, "maximum consumers limit reached"),
    "wq_requires_explicit_ack": ErrorSpec(10098, 400, "workqueue stream requires explicit ack"),
    "wq_multiple_unfiltered": ErrorSpec(
        10099, 400, "multiple non-filtered consumers not allowed on workqueue stream"
    ),
    "wq_consumer_not_unique": ErrorSpec(
        10100, 400, "filtered consumer not unique on workqueue stream"
    ),
    "wq_consumer_not_deliver_all": ErrorSpec(
        10101, 400, "consumer must be deliver all on workqueue stream"
    ),
    "push_max_waiting": ErrorSpec(10080, 400, "consumer in push mode can not set max waiting"),
    "max_deliver_backoff": ErrorSpec(
        10116, 400, "max deliver is required to be > length of backoff values"
    ),
    "deliver_subject_wildcards": ErrorSpec(10079, 400, "consumer deliver subject has wildcards"),
    "deliver_subject_cycle": ErrorSpec(10081, 400, "consumer deliver subject forms a cycle"),
    "small_heartbeat": ErrorSpec(10083, 400, "consumer idle heartbeat needs to be >= 100ms"),
    "heartbeat_requires_push": ErrorSpec(
        10088, 400, "consumer idle heartbeat requires a push based consumer"
    ),
    "fc_requires_push": ErrorSpec(
        10089, 400, "consumer flow control requires a push based consumer"
    ),
    "filter_subject_mismatch": ErrorSpec(
        10131,
        400,
        "Consumer create request did not match filtered subject from create subject",
    ),
    "durable_name_mismatch": ErrorSpec(
        10017, 400, "consumer name in subject does not match durable name in request"
    ),
    "consumer_name_invalid": ErrorSpec(10012, 500, "{err}"),
    # As nats-server 2.15.1 answers (measured; the spec's table has none of these).
    "replicas_negative": ErrorSpec(10133, 400, "replicas count cannot be negative"),
    "consumer_ack_wait_negative": ErrorSpec(10183, 400, "consumer ack wait needs to be positive"),
    "consumer_backoff_negative": ErrorSpec(10184, 400, "consumer backoff needs to be positive"),
    "consumer_filters_overlap": ErrorSpec(10138, 400, "consumer subject filters cannot overlap"),
    "consumer_filter_and_filters": ErrorSpec(
        10136, 400, "consumer cannot have both FilterSubject and FilterSubjects specified"
    ),
    "stream_name_path_separators": ErrorSpec(
        10128, 400, "Stream name can not contain path separators"
    ),
    "consumer_name_path_separators": ErrorSpec(
        10127, 400, "Consumer name can not contain path separators"
    ),
    "consumer_max_expires_too_small": ErrorSpec(
        10115, 400, "consumer max request expires needs to be >= 1ms"
    ),
    "consumer_invalid_sampling": ErrorSpec(
        10095, 400, "failed to parse consumer sampling configuration: {err}"
    ),
    "consumer_pull_rate_limit": ErrorSpec(
        10086, 400, "consumer in pull mode can not have rate limit set"
    ),
    "consumer_direct_requires_push": ErrorSpec(
        10090, 400, "consumer direct requires a push based consumer"
    ),
    "consumer_direct_requires_ephemeral": ErrorSpec(
        10091, 400, "consumer direct requires an ephemeral consumer"
    ),
    "consumer_priority_groups_without_policy": ErrorSpec(
        10196, 400, "consumer can not have priority groups when policy is none"
    ),
    "consumer_priority_policy_without_groups": ErrorSpec(
        10159, 400, "Setting PriorityPolicy requires at least one PriorityGroup to be set"
    ),
    "consumer_pinned_ttl_without_policy": ErrorSpec(
        10197, 400, "PinnedTTL cannot be set when PriorityPolicy is none"
    ),
}


class JetStreamError(Exception):
    """A JetStream API error: what goes on the wire as ``{"code","err_code","description"}``."""

    def __init__(self, err_code: int, code: int, description: str) -> None:
        super().__init__(f"{description} ({code}/{err_code})")
        self.err_code = err_code
        self.code = code
        self.description = description

    def to_wire(self) -> dict[str, object]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JetStreamError) and (
            self.err_code,
            self.code,
            self.description,
        ) == (other.err_code, other.code, other.description)

    def __hash__(self) -> int:
        return hash((self.err_code, self.code, self.description))

    def __reduce__(self) -> tuple[type[JetStreamError], tuple[int, int, str]]:
        return (JetStreamError, (self.err_code, self.code, self.description))


def js_error(name: str, **fmt: object) -> JetStreamError:
    """Build the error ``name`` of :data:`ERRORS`, formatting its description with ``fmt``."""
    spec = ERRORS[name]
    desc = spec.description.format(**fmt) if fmt else spec.description
    return JetStreamError(spec.err_code, spec.code, desc)

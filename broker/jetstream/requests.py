"""The JetStream API's requests answered with nats-server 2.15.1's JSON (spec §1.2).

:class:`Requests` takes a request subject in NATS form (``$JS.API.STREAM.CREATE.ORDERS``)
and its body, and returns the JSON answer as bytes. It calls the store's synchronous
helpers, so it runs in a worker thread (never on the trio thread, never on the store's
writer). ``CONSUMER.MSG.NEXT`` is not here: it answers with deliveries
(``broker.jetstream.pulls``).

The ``$MQTT_*`` streams that hold the broker's own MQTT state are not the user's: they
are absent from NAMES and LIST, and every request naming one is answered as for a
stream that does not exist. The ``[jetstream]`` limits (streams, consumers, reserved
bytes) are checked here, before the store is asked.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, Final

from broker.config import JetStreamConfig
from store import JetStreamError, Store, StoredMsg, gojson
from store.errors import js_error
from store.headerblock import encode_headers
from store.models import ConsumerConfig, StreamConfig, format_time

Json = dict[str, Any]

API_PREFIX: Final = "$JS.API."
INTERNAL_PREFIX: Final = "$MQTT_"  # the broker's own streams (broker.persist.records)
API_LEVEL: Final = 5
NAMES_LIMIT: Final = 1024
LIST_LIMIT: Final = 256
MAX_REQUEST_BYTES: Final = 1024 * 1024  # nats-server's max_payload
# What nats-server's error answers carry besides the error (measured).
_ERROR_EXTRAS: Final[dict[str, Json]] = {
    "stream_info_response": {"total": 0, "offset": 0, "limit": 0},
    "stream_purge_response": {"purged": 0},
    "consumer_pause_response": {"paused": False, "pause_until": gojson.ZERO_TIME},
}
_CHANGES: Final = frozenset(
    (
        "stream_create_response",
        "stream_update_response",
        "stream_delete_response",
        "consumer_create_response",
        "consumer_delete_response",
    )
)

# Errors the store's table does not hold (account limits; nats-server's words).
MAX_STREAMS = JetStreamError(10027, 400, "maximum number of streams reached")
MAX_CONSUMERS = JetStreamError(10026, 400, "maximum consumers limit reached")
INSUFFICIENT = JetStreamError(10023, 503, "insufficient resources")
MAX_BYTES_REQUIRED = JetStreamError(
    10113, 400, "account requires a stream config to have max bytes set"
)
RESERVED_NAME = JetStreamError(10052, 500, "stream name is reserved to the broker")
NOT_ENABLED = JetStreamError(10076, 503, "JetStream not enabled")

_INFO_FIELDS: Final[dict[str, gojson.GoType]] = {
    "deleted_details": gojson.BOOL,
    "subjects_filter": gojson.STRING,
    "offset": gojson.INT,
}
_LIST_FIELDS: Final[dict[str, gojson.GoType]] = {"offset": gojson.INT, "subject": gojson.STRING}
_PURGE_FIELDS: Final[dict[str, gojson.GoType]] = {
    "filter": gojson.STRING,
    "seq": gojson.UINT64,
    "keep": gojson.UINT64,
}
_GET_FIELDS: Final[dict[str, gojson.GoType]] = {
    "seq": gojson.UINT64,
    "last_by_subj": gojson.STRING,
    "next_by_subj": gojson.STRING,
    "start_time": gojson.TIME,
    "no_hdr": gojson.BOOL,
    "batch": gojson.INT,
    "max_bytes": gojson.INT,
    "multi_last": gojson.GoList("[]string", gojson.STRING),
    "up_to_seq": gojson.UINT64,
    "up_to_time": gojson.TIME,
}
_PAUSE_FIELDS: Final[dict[str, gojson.GoType]] = {"pause_until": gojson.TIME}
_DELETE_FIELDS: Final[dict[str, gojson.GoType]] = {"seq": gojson.UINT64, "no_erase": gojson.BOOL}
_CONSUMER_REQUEST: Final[dict[str, gojson.GoType]] = {
    "stream_name": gojson.STRING,
    "config": gojson.GoKind("ConsumerConfig", dict),
    "action": gojson.STRING,
    "pedantic": gojson.BOOL,
}


def _type(name: str) -> str:
    return f"io.nats.jetstream.api.v1.{name}"


def _dumps(doc: Json) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _body(raw: bytes, fields: dict[str, gojson.GoType], where: str) -> Json:
    """An optional JSON object body, decoded as Go decodes it (10025 on its shape)."""
    if not raw.strip():
        return {}
    try:
        data = gojson.loads(raw)
    except ValueError as exc:
        raise js_error("invalid_json", err=str(exc)) from None
    if not isinstance(data, dict):
        raise js_error("invalid_json", err="json: cannot unmarshal into Go value")
    return gojson.check_body(data, fields, where)


def _empty(raw: bytes) -> None:
    if raw.strip():
        raise js_error("not_empty_request")


def _user(name: str) -> str:
    """A stream name the user may name (the broker's own answer as not found)."""
    if name.startswith(INTERNAL_PREFIX):
        raise js_error("stream_not_found")
    return name


def stored_message(msg: StoredMsg) -> Json:
    """A stored message as STREAM.MSG.GET's ``message`` (headers and payload in base64)."""
    out: Json = {"subject": msg.subject, "seq": msg.seq}
    if msg.headers:
        out["hdrs"] = base64.b64encode(encode_headers(msg.headers)).decode()
    if msg.payload:
        out["data"] = base64.b64encode(msg.payload).decode()
    out["time"] = format_time(msg.time_ns)
    return out


class Requests:
    """Answers API requests from the store (one per broker; thread-safe as the store is)."""

    def __init__(
        self,
        store: Store,
        config: Callable[[], JetStreamConfig],
    ) -> None:
        self.store = store
        self.config = config  # read per request: a reload applies to the next one
        self.total = 0
        self.errors = 0
        self._routes: dict[tuple[str, ...], tuple[str, Callable[[list[str], bytes], Json]]] = {
            ("INFO",): ("account_info_response", self._info),
            ("STREAM", "CREATE"): ("stream_create_response", self._stream_create),
            ("STREAM", "UPDATE"): ("stream_update_response", self._stream_update),
            ("STREAM", "INFO"): ("stream_info_response", self._stream_info),
            ("STREAM", "DELETE"): ("stream_delete_response", self._stream_delete),
            ("STREAM", "PURGE"): ("stream_purge_response", self._stream_purge),
            ("STREAM", "NAMES"): ("stream_names_response", self._stream_names),
            ("STREAM", "LIST"): ("stream_list_response", self._stream_list),
            ("STREAM", "MSG", "GET"): ("stream_msg_get_response", self._msg_get),
            ("STREAM", "MSG", "DELETE"): ("stream_msg_delete_response", self._msg_delete),
            ("CONSUMER", "CREATE"): ("consumer_create_response", self._consumer_create),
            ("CONSUMER", "DURABLE", "CREATE"): ("consumer_create_response", self._durable_create),
            ("CONSUMER", "INFO"): ("consumer_info_response", self._consumer_info),
            ("CONSUMER", "DELETE"): ("consumer_delete_response", self._consumer_delete),
            ("CONSUMER", "NAMES"): ("consumer_names_response", self._consumer_names),
            ("CONSUMER", "LIST"): ("consumer_list_response", self._consumer_list),
            ("CONSUMER", "PAUSE"): ("consumer_pause_response", self._consumer_pause),
        }

    # -- dispatch ------------------------------------------------------------------------------

    def route(self, tokens: list[str]) -> tuple[str, Callable[[list[str], bytes], Json], int]:
        """The answer type, the handler and how many tokens name the request."""
        for n in (3, 2, 1):
            found = self._routes.get(tuple(tokens[:n]))
            if found is not None:
                return found[0], found[1], n
        raise KeyError

    def handle(self, subject: str, body: bytes) -> tuple[bytes, bool]:
        """The JSON answer to a request on ``subject`` (NATS form, ``$JS.API.``...), and
        whether streams or consumers changed (capture and push interest must learn it
        before the answer goes out)."""
        tokens = subject[len(API_PREFIX) :].split(".") if subject.startswith(API_PREFIX) else []
        try:
            kind, fn, n = self.route(tokens)
        except KeyError:
            self._count(error=True)
            doc = {"type": _type("system_response"), **_error(js_error("bad_request"))}
            return _dumps(doc), False
        try:
            if len(body) > MAX_REQUEST_BYTES:
                raise js_error("bad_request")
            doc = fn(tokens[n:], body)
        except JetStreamError as exc:
            self._count(error=True)
            doc = _error(exc) | _ERROR_EXTRAS.get(kind, {})
            return _dumps({"type": _type(kind), **doc}), False
        self._count(error=False)
        return _dumps({"type": _type(kind), **doc}), kind in _CHANGES

    def _count(self, *, error: bool) -> None:
        """After the answer is made (an INFO counts the requests before it, as there)."""
        self.total += 1
        self.errors += error

    # -- account -------------------------------------------------------------------------------

    def _user_streams(self) -> list[str]:
        return [n for n in self.store.stream_names() if not n.startswith(INTERNAL_PREFIX)]

    def _info(self, args: list[str], body: bytes) -> Json:
        if args:
            raise js_error("bad_request")
        cfg = self.config()
        names = self._user_streams()
        storage = consumers = 0
        for name in names:
            try:
                state = self.store.stream_info(name).state
            except JetStreamError:
                continue  # deleted meanwhile
            storage += state.bytes
            consumers += state.consumer_count
        return {
            "memory": 0,
            "storage": storage,
            "reserved_memory": 0,
            "reserved_storage": 0,
            "streams": len(names),
            "consumers": consumers,
            "limits": {
                "max_memory": -1,
                "max_storage": cfg.max_bytes,
                "max_streams": cfg.max_streams,
                "max_consumers": cfg.max_consumers,
                "max_ack_pending": -1,
                "memory_max_stream_bytes": -1,
                "storage_max_stream_bytes": -1,
                "max_bytes_required": cfg.max_bytes >= 0,
            },
            "api": {"level": API_LEVEL, "total": self.total, "errors": self.errors},
        }

    # -- streams -------------------------------------------------------------------------------

    @staticmethod
    def _one(args: list[str]) -> str:
        if len(args) != 1 or not args[0]:
            raise js_error("bad_request")
        return args[0]

    def _stream_config(self, args: list[str], body: bytes) -> StreamConfig:
        """The body's config; its name must be the subject's (10056), checked once the
        body decodes (its shape errors, 10025, come first, as there)."""
        name = self._one(args)
        try:
            data = gojson.loads(body) if body.strip() else {}
        except ValueError as exc:
            raise js_error("invalid_json", err=str(exc)) from None
        if not isinstance(data, dict):
            raise js_error("invalid_json", err="json: cannot unmarshal into Go value")
        try:
            cfg = StreamConfig.from_wire(data)
        except JetStreamError as exc:
            if exc.err_code != 10025 and data.get("name") != name:
                raise js_error("stream_mismatch") from None
            raise
        if cfg.name != name:
            raise js_error("stream_mismatch")
        if name.startswith(INTERNAL_PREFIX):
            raise RESERVED_NAME
        return cfg

    def _check_bytes(self, cfg: StreamConfig) -> None:
        limit = self.config().max_bytes
        if limit < 0:
            return
        if cfg.max_bytes is None or cfg.max_bytes <= 0:
            raise MAX_BYTES_REQUIRED
        reserved = 0
        for name in self._user_streams():
            if name == cfg.name:
                continue
            try:
                other = self.store.stream_info(name).config.max_bytes or 0
            except JetStreamError:
                continue
            reserved += max(other, 0)
        if reserved + cfg.max_bytes > limit:
            raise INSUFFICIENT

    def _stream_create(self, args: list[str], body: bytes) -> Json:
        cfg = self._stream_config(args, body)
        names = self._user_streams()
        limit = self.config().max_streams
        if limit >= 0 and cfg.name not in names and len(names) >= limit:
            raise MAX_STREAMS
        self._check_bytes(cfg)
        info = self.store.create_stream(cfg)
        return {**info.to_wire(), "did_create": True}

    def _stream_update(self, args: list[str], body: bytes) -> Json:
        cfg = self._stream_config(args, body)
        self._check_bytes(cfg)
        info = self.store.update_stream(cfg)
        return info.to_wire()

    def _stream_info(self, args: list[str], body: bytes) -> Json:
        name = _user(self._one(args))
        req = _body(body, _INFO_FIELDS, "JSApiStreamInfoRequest")
        offset = req.get("offset", 0)
        info, paged = self.store.stream_info_paged(
            name,
            subjects_filter=req.get("subjects_filter") or None,
            deleted_details=bool(req.get("deleted_details")),
            offset=max(offset, 0),
        )
        return {"total": paged.total, "offset": paged.offset, "limit": paged.limit} | (
            info.to_wire()
        )

    def _stream_delete(self, args: list[str], body: bytes) -> Json:
        name = _user(self._one(args))
        _empty(body)
        self.store.delete_stream(name)
        return {"success": True}

    def _stream_purge(self, args: list[str], body: bytes) -> Json:
        name = _user(self._one(args))
        req = _body(body, _PURGE_FIELDS, "JSApiStreamPurgeRequest")
        if req.get("seq") and req.get("keep"):
            raise js_error("bad_request")
        purged = self.store.purge_stream(
            name, filter=req.get("filter") or None, seq=req.get("seq"), keep=req.get("keep")
        )
        return {"success": True, "purged": purged}

    def _paged(self, body: bytes, where: str) -> tuple[int, str | None]:
        req = _body(body, _LIST_FIELDS, where)
        return max(req.get("offset", 0), 0), req.get("subject") or None

    @staticmethod
    def _page(names: list[str], offset: int, limit: int) -> tuple[int, list[str]]:
        """The offset as answered (at most the total, as there) and the page."""
        offset = min(offset, len(names))
        return offset, names[offset : offset + limit]

    def _stream_names(self, args: list[str], body: bytes) -> Json:
        if args:
            raise js_error("bad_request")
        offset, subject = self._paged(body, "JSApiStreamNamesRequest")
        names = [n for n in self.store.stream_names(subject) if not n.startswith(INTERNAL_PREFIX)]
        offset, page = self._page(names, offset, NAMES_LIMIT)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "streams": page}

    def _stream_list(self, args: list[str], body: bytes) -> Json:
        if args:
            raise js_error("bad_request")
        offset, subject = self._paged(body, "JSApiStreamListRequest")
        names = [n for n in self.store.stream_names(subject) if not n.startswith(INTERNAL_PREFIX)]
        infos: list[Json] = []
        offset, page = self._page(names, offset, LIST_LIMIT)
        for name in page:
            try:
                infos.append(self.store.stream_info(name).to_wire())
            except JetStreamError:
                continue  # deleted meanwhile
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "streams": infos}

    def _msg_get(self, args: list[str], body: bytes) -> Json:
        name = _user(self._one(args))
        req = _body(body, _GET_FIELDS, "JSApiMsgGetRequest")
        if not req or "batch" in req or "max_bytes" in req or "multi_last" in req:
            raise js_error("bad_request")
        seq = req.get("seq")
        last, nxt = req.get("last_by_subj"), req.get("next_by_subj")
        if last and (nxt or seq):
            raise js_error("bad_request")
        if last:
            msg = self.store.last_by_subject(name, last)
        elif nxt:
            msg = self.store.next_by_subject(name, nxt, seq or 0)
        elif "start_time" in req:
            msg = self._by_time(name, gojson.parse_time(req["start_time"]))
        elif seq:
            msg = self.store.get_msg(name, seq)
        else:
            raise js_error("bad_request")
        found = stored_message(msg)
        if req.get("no_hdr"):
            found.pop("hdrs", None)
        return {"message": found}

    def _by_time(self, name: str, start_ns: int) -> StoredMsg:
        for msg in self.store.iter_msgs(name):
            if msg.time_ns >= start_ns:
                return msg
        raise js_error("no_message_found")

    def _msg_delete(self, args: list[str], body: bytes) -> Json:
        name = _user(self._one(args))
        req = _body(body, _DELETE_FIELDS, "JSApiMsgDeleteRequest")
        if "seq" not in req:
            raise js_error("bad_request")
        self.store.delete_msg(name, req["seq"])
        return {"success": True}

    # -- consumers -----------------------------------------------------------------------------

    def _consumer_request(self, stream: str, body: bytes) -> tuple[Json, str]:
        req = _body(body, _CONSUMER_REQUEST, "CreateConsumerRequest")
        if req.get("stream_name") != stream:
            raise js_error("stream_mismatch")
        action = req.get("action", "")
        if action not in ("", "create", "update"):
            raise js_error("bad_request")
        cfg = req.get("config")
        if cfg is None:
            raise js_error("bad_request")
        return cfg, action

    def _check_consumer_limit(self, stream: str, name: str | None) -> None:
        limit = self.config().max_consumers
        if limit < 0:
            return
        total = 0
        for s in self._user_streams():
            try:
                names = self.store.consumer_names(s)
            except JetStreamError:
                continue
            if s == stream and name is not None and name in names:
                return  # an update
            total += len(names)
        if total >= limit:
            raise MAX_CONSUMERS

    def _create(self, stream: str, cfg_body: Json, action: str) -> Json:
        cfg = ConsumerConfig.from_wire(cfg_body)
        self._check_consumer_limit(stream, cfg.name or cfg.durable_name)
        info = self.store.create_consumer(stream, cfg, action)
        return info.to_wire()

    def _consumer_create(self, args: list[str], body: bytes) -> Json:
        if not args or not args[0]:
            raise js_error("bad_request")
        stream = _user(args[0])
        cfg, action = self._consumer_request(stream, body)
        if len(args) >= 2:  # CONSUMER.CREATE.<s>.<c>[.<filter>]
            name = args[1]
            durable = cfg.get("durable_name")
            if durable and durable != name:
                raise js_error("durable_name_mismatch")
            # A different config.name is overridden by the subject's (measured).
            if len(args) > 2:
                if cfg.get("filter_subjects"):
                    raise JetStreamError(
                        10137,
                        400,
                        "consumer with multiple subject filters cannot use subject based API",
                    )
                if cfg.get("filter_subject", "") != ".".join(args[2:]):
                    raise js_error("filter_subject_mismatch")
            cfg = {**cfg, "name": name}
        elif cfg.get("durable_name"):
            raise JetStreamError(
                10020,
                400,
                "consumer expected to be ephemeral but a durable name was set in request",
            )
        return self._create(stream, cfg, action)

    def _durable_create(self, args: list[str], body: bytes) -> Json:
        if len(args) != 2 or not args[0] or not args[1]:
            raise js_error("bad_request")
        stream = _user(args[0])
        cfg, action = self._consumer_request(stream, body)
        durable = cfg.get("durable_name")
        if not durable:
            raise JetStreamError(
                10018, 400, "consumer expected to be durable but a durable name was not set"
            )
        if durable != args[1]:
            raise js_error("durable_name_mismatch")
        return self._create(stream, cfg, action)

    @staticmethod
    def _two(args: list[str]) -> tuple[str, str]:
        if len(args) != 2 or not args[0] or not args[1]:
            raise js_error("bad_request")
        return _user(args[0]), args[1]

    def _consumer_info(self, args: list[str], body: bytes) -> Json:
        stream, name = self._two(args)
        _empty(body)
        return self.store.consumer_info(stream, name).to_wire()

    def _consumer_delete(self, args: list[str], body: bytes) -> Json:
        stream, name = self._two(args)
        _empty(body)
        self.store.delete_consumer(stream, name)
        return {"success": True}

    def _consumer_pause(self, args: list[str], body: bytes) -> Json:
        """``{"pause_until": "<RFC 3339>"}``; an empty body or the zero time resumes."""
        stream, name = self._two(args)
        req = _body(body, _PAUSE_FIELDS, "JSApiConsumerPauseRequest")
        return self.store.pause_consumer(
            stream, name, req.get("pause_until") or gojson.ZERO_TIME
        ).to_wire()

    def _consumer_names(self, args: list[str], body: bytes) -> Json:
        stream = _user(self._one(args))
        offset, _ = self._paged(body, "JSApiConsumersRequest")
        names = self.store.consumer_names(stream)
        offset, page = self._page(names, offset, NAMES_LIMIT)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "consumers": page}

    def _consumer_list(self, args: list[str], body: bytes) -> Json:
        stream = _user(self._one(args))
        offset, _ = self._paged(body, "JSApiConsumersRequest")
        names = self.store.consumer_names(stream)
        infos: list[Json] = []
        offset, page = self._page(names, offset, LIST_LIMIT)
        for name in page:
            try:
                infos.append(self.store.consumer_info(stream, name).to_wire())
            except JetStreamError:
                continue
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "consumers": infos}


def _error(exc: JetStreamError) -> Json:
    return {"error": exc.to_wire()}

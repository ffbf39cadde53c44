"""Differential test: pull requests that queue behind each other, on our store and on a
real nats-server (as in test_against_nats.py).

Each scenario makes a stream and one explicit-ack pull consumer on both, then runs the same
steps: pull requests (batch, ``expires``, ``no_wait``, ``idle_heartbeat``), publishes,
acks and waits (real time for the server; for the store, its injected clock moved to each timer as
it falls due, and ticked there). Idle heartbeats in a row count once (how many fit in a
wait is timing), with the last delivery they carry. Every request's outcome — the
stream seqs delivered to its inbox, then the status that ended it, if any, with the
messages it says the request had yet to take — and the
consumer's num_waiting must agree. The server's behaviour found this way: a ``no_wait``
request is answered 404 at once when nothing is there, whatever waits ahead of it; 408
"Requests Pending" when the requests ahead would take everything there is; with
``expires`` it waits for its first message instead of a 404; a heartbeat more than half
the expiry, or with none, is refused 400.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from store import Delivery, PullStatus, Store
from tests.store.conftest import SEC, Events, FakeClock
from tests.store.test_against_nats import Outcomes, compare_timed

# ("pull", inbox, request JSON) | ("pub", n) | ("wait", seconds) | ("ack", stream seq)
Step = tuple[Any, ...]
# Outcomes: inbox -> its delivered seqs, then its status

WAIT = {"expires": 30 * SEC}  # a request that waits (longer than any scenario)
SCENARIOS: list[tuple[dict[str, Any], list[Step]]] = [
    # no_wait behind a waiting request, nothing there: 404 at once, before and after.
    (
        {},
        [
            ("pull", "a", {"batch": 5, **WAIT}),
            ("pull", "b", {"batch": 1, "no_wait": True}),
            ("pub", 2),
            ("pull", "c", {"batch": 1, "no_wait": True}),
        ],
    ),
    # no_wait with expires and nothing there waits for its first message, then 404.
    ({}, [("pull", "d", {"batch": 3, "no_wait": True, "expires": 2 * SEC}), ("pub", 1)]),
    # ... or for its expiry: 408.
    ({}, [("pull", "d", {"batch": 3, "no_wait": True, "expires": SEC}), ("wait", 2)]),
    # no_wait with expires and one message there: it, then 404.
    ({}, [("pub", 1), ("pull", "e", {"batch": 3, "no_wait": True, "expires": 2 * SEC})]),
    # Held back by max_ack_pending, the waiting request would take all there is: 408.
    (
        {"max_ack_pending": 1},
        [
            ("pub", 4),
            ("pull", "a", {"batch": 5, **WAIT}),
            ("pull", "b", {"batch": 1, "no_wait": True}),
            ("pull", "c", {"batch": 5, "no_wait": True}),
            ("pull", "f", {"batch": 1, "no_wait": True, "expires": 3 * SEC}),
        ],
    ),
    # Two waiting requests, served in order.
    (
        {},
        [
            ("pull", "a", {"batch": 2, **WAIT}),
            ("pull", "b", {"batch": 1, "no_wait": True, "expires": 5 * SEC}),
            ("pub", 3),
        ],
    ),
    # Idle heartbeats while a request waits, from its last message on; then its expiry.
    (
        {},
        [
            ("pull", "h", {"batch": 5, "expires": 5 * SEC, "idle_heartbeat": SEC}),
            ("wait", 1.5),
            ("pub", 1),
            ("wait", 4),
        ],
    ),
    # A heartbeat more than half the expiry (or with none) is refused.
    (
        {},
        [
            ("pull", "a", {"batch": 1, "expires": 2 * SEC, "idle_heartbeat": 1_500_000_000}),
            ("pull", "b", {"batch": 1, "no_wait": True, "idle_heartbeat": SEC}),
            ("pull", "c", {"batch": 1, "idle_heartbeat": SEC}),
        ],
    ),
    # A waiting request's max_bytes (one message is ≈ 45 bytes here): the message that
    # does not fit ends it with 409.
    ({}, [("pull", "m", {"batch": 5, "max_bytes": 60, **WAIT}), ("pub", 2)]),
    # ... while taking turns with another request.
    (
        {},
        [
            ("pull", "a", {"batch": 3, "max_bytes": 100, **WAIT}),
            ("pull", "b", {"batch": 3, **WAIT}),
            ("pub", 5),
        ],
    ),
    # Held back by max_ack_pending, waiting requests take turns as acks make room.
    (
        {"max_ack_pending": 1},
        [
            ("pub", 4),
            ("pull", "a", {"batch": 2, **WAIT}),
            ("pull", "b", {"batch": 2, **WAIT}),
            ("ack", 1),
            ("ack", 2),
            ("ack", 3),
        ],
    ),
    # max_waiting reached: a waiting request is refused 409, a no_wait one with nothing
    # there is answered 404.
    (
        {"max_waiting": 1},
        [
            ("pull", "a", {"batch": 2, **WAIT}),
            ("pull", "b", {"batch": 1, **WAIT}),
            ("pull", "c", {"batch": 1, "no_wait": True}),
        ],
    ),
]


def _status_text(code: str | int, description: str, extra: str | int | None) -> str:
    """A status as text, with the messages it says the request had yet to take, or a
    heartbeat's last delivery, if any."""
    return f"{code} {description}" + (f" ({extra})" if extra else "")


def _add(got: list[str], item: str) -> None:
    """Heartbeats in a row count once: how many fit in a wait is a matter of timing."""
    if not (got and item == got[-1] and item.startswith("100 ")):
        got.append(item)


async def _on_server(nc: Client, name: str, cfg: dict[str, Any], steps: list[Step]) -> Outcomes:
    await nc.request(
        f"$JS.API.STREAM.CREATE.{name}",
        json.dumps({"name": name, "subjects": [f"{name}.>"]}).encode(),
        timeout=10,
    )
    ccfg = {"durable_name": "c", "ack_policy": "explicit", **cfg}
    await nc.request(
        f"$JS.API.CONSUMER.CREATE.{name}.c",
        json.dumps({"stream_name": name, "config": ccfg}).encode(),
        timeout=10,
    )
    out: Outcomes = {}
    acks: dict[int, str] = {}  # stream seq -> its ack subject
    delivered = asyncio.Event()  # set by every delivery
    for step in steps:
        if step[0] == "pull":
            inbox = step[1]
            got = out.setdefault(inbox, [])

            async def cb(msg: Msg, got: list[str] = got) -> None:
                headers = msg.headers or {}
                if "Status" in headers:
                    last = headers.get("Nats-Last-Consumer")
                    extra = (
                        f"last {last}/{headers.get('Nats-Last-Stream')}"
                        if last is not None
                        else headers.get("Nats-Pending-Messages")
                    )
                    _add(
                        got, _status_text(headers["Status"], headers.get("Description", ""), extra)
                    )
                else:
                    got.append(str(msg.metadata.sequence.stream))
                    acks[msg.metadata.sequence.stream] = msg.reply
                    delivered.set()

            await nc.subscribe(f"in.{name}.{inbox}", cb=cb)
            await nc.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{name}.c",
                json.dumps(step[2]).encode(),
                reply=f"in.{name}.{inbox}",
            )
        elif step[0] == "pub":
            for _ in range(step[1]):
                await nc.request(f"{name}.x", b"m", timeout=10)
        elif step[0] == "ack":
            # The message must have come first (the store delivered it by now): a loaded
            # machine may hold the server's delivery back past the pause below.
            while step[1] not in acks:
                delivered.clear()
                await asyncio.wait_for(delivered.wait(), timeout=5)
            await nc.request(acks[step[1]], b"+ACK", timeout=10)
        else:
            await asyncio.sleep(step[1] + 0.5)
        await asyncio.sleep(0.3)  # the server's answers arrive
    info = await nc.request(f"$JS.API.CONSUMER.INFO.{name}.c", b"", timeout=10)
    out["num_waiting"] = [str(json.loads(info.data).get("num_waiting", 0))]
    answered = {k: list(v) for k, v in out.items()}  # (the deletion answers the rest 409)
    await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)
    return answered


def _on_store(path: Path, name: str, cfg: dict[str, Any], steps: list[Step]) -> Outcomes:
    """The steps on our store, with the server's names (max_bytes counts them)."""
    clock, events = FakeClock(), Events()
    out: Outcomes = {}
    with Store.open(path, sync="batch", clock=clock, on_event=events) as s:
        s.create_stream({"name": name, "subjects": [f"{name}.>"]})
        s.create_consumer(name, {"durable_name": "c", "ack_policy": "explicit", **cfg})
        for step in steps:
            if step[0] == "pull":
                req = step[2]
                out[step[1]] = []
                s.pull(
                    name,
                    "c",
                    step[1],
                    batch=req["batch"],
                    expires_ns=req.get("expires", 0),
                    no_wait=req.get("no_wait", False),
                    max_bytes=req.get("max_bytes", 0),
                    idle_heartbeat_ns=req.get("idle_heartbeat", 0),
                )
            elif step[0] == "pub":
                for _ in range(step[1]):
                    s.publish(f"{name}.x", b"m")
            elif step[0] == "ack":
                s.ack(name, "c", step[1])
            else:  # time passes: every timer that falls due in it fires on time
                until = clock.now + int(step[1] * SEC)
                while (due := s.next_deadline()) is not None and due <= until:
                    clock.now = due
                    s.tick(due).result(timeout=30)
                clock.now = until
            for e in events.take():
                if isinstance(e, Delivery):
                    out[e.reply].append(str(e.msg.seq))
                elif isinstance(e, PullStatus):
                    extra = (
                        f"last {e.last_consumer_seq}/{e.last_stream_seq}"
                        if e.code == 100
                        else e.pending_msgs
                    )
                    _add(out[e.reply], _status_text(e.code, e.description, extra))
        out["num_waiting"] = [str(s.consumer_info(name, "c").num_waiting)]
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_queued_pull_requests_answer_as_nats_server_does(tmp_path: Path) -> None:
    compare_timed(tmp_path, "Q", SCENARIOS, _on_server, _on_store, at_once=False)

"""Differential test: acks and redeliveries over time, on our store and on a real
nats-server (as in test_against_nats.py).

Each scenario makes a stream and one consumer (pull, explicit acks, ``ack_wait`` of a
second, unless the scenario says otherwise: ``ack_wait``, ``backoff``, ``max_deliver``,
``max_ack_pending``, ``ack_policy``, a filter, ephemeral with ``inactive_threshold``,
push) on both, then runs the same steps on one timeline: publishes, pull requests, acks
of every kind sent to the reply subject of a message's latest delivery, or its first
(``+ACK``, ``-NAK`` with and without a delay, ``+WPI``, ``+TERM`` with a reason,
``+NXT``), message deletions, purges, consumer updates, subscribers to a push consumer's
deliver subject coming and going, consumer and stream info, and waits (some streams with
``max_age``, ``max_msgs``, workqueue or interest retention). The store gets each ack as
the broker would hand it over: reply subject and payload parsed by ``store.acks``.

The server runs the steps in real time, each at its moment of the timeline; the store's
injected clock is moved to each moment, firing every timer that falls due on the way. No
timer falls due within 0.1 s of a step that acts (the store side checks it), so the
server's latency does not change the order (its expiry of messages by ``max_age`` can run
a few tenths late: those scenarios look a second after). Compared: each request's
deliveries (stream seq and delivery count; not the pending count in the ack reply
subject: with a burst of publishes the server's delivery races its appends) in order,
the advisories (max deliveries, terminated), and at each info step the stream's messages
and the consumer's delivered and ack floor sequences, num_ack_pending, num_redelivered,
num_pending, num_waiting and push_bound, or that it is gone.

Found this way: a pending message keeps the consumer seq of its first delivery for the
ack floor; with ``ack_policy: all`` the floor is the acked delivery's, and an ack from a
delivery at or below it does nothing; a pending message deleted, dropped by a limit or
expired (not purged) is advised terminated; with ``max_deliver`` 1 a message goes as its
ack wait ends, not at the next pull; a consumer with ``inactive_threshold`` is kept while
its messages wait for their acks, and is still there when its last pull request expires;
an update of ``ack_wait`` re-times the messages already out; a ``+WPI`` for a message
whose ack wait ended leaves it queued for redelivery; an ack just above the floor moves
it past messages given up on (max_deliver), and acks of those move nothing. (The server
deletes an inactive pull consumer at a check every threshold + 0.1-1 s, so the scenarios
look well after that.)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from store import Advisory, Delivery, JetStreamError, PullStatus, Store
from store.acks import ack_from_payload, parse_ack_reply
from tests.store.conftest import SEC, T0, Events, FakeClock
from tests.store.test_against_nats import Outcomes, compare_timed

# ("pub", n) | ("pub-y", n): on another subject | ("pull", inbox, batch[, expires ns])
# | ("ack", stream seq, payload[, inbox for +NXT])
# | ("ack-first", stream seq, payload): to the reply subject of its first delivery
# | ("delete", stream seq) | ("purge",) | ("info",) | ("wait", seconds)
# | ("bind",) | ("unbind",): a subscriber to a push consumer's deliver subject
# | ("update", consumer config changes)
Step = tuple[Any, ...]
# Outcomes: inbox, "info" or "advisories" -> what came, in order

STEP_S = 0.3  # every step but a wait takes this long on the timeline
MARGIN_NS = SEC // 10  # no timer falls due closer than this to a step that acts
WAIT_NS = 60 * SEC  # a pull request's expiry: longer than any scenario
SCENARIOS: list[tuple[dict[str, Any], list[Step]]] = [
    # ack_wait (1 s) runs out: redelivered in stream order, the delivery count going up.
    # (Moments on the timeline, and the timers between them, in the comments.)
    (
        {},
        [
            ("pull", "a", 10),  # 0
            ("pub", 2),  # 0.3: delivered
            ("info",),  # 0.6
            ("wait", 0.8),  # 0.9; both again at 1.3
            ("info",),  # 1.7
            ("ack", 1, "+ACK"),  # 2.0; seq 2 again at 2.3
            ("wait", 0.4),
            ("info",),  # 2.7
        ],
    ),
    # -NAK: again at once; with a delay (JSON or a Go duration), after it.
    (
        {"ack_wait": 5 * SEC},
        [
            ("pull", "a", 10),  # 0
            ("pub", 3),  # 0.3
            ("ack", 1, "-NAK"),  # 0.6: again at once
            ("ack", 2, '-NAK {"delay": 1000000000}'),  # 0.9: again at 1.9
            ("ack", 3, "-NAK 2s"),  # 1.2: again at 3.2
            ("info",),  # 1.5
            ("wait", 0.4),
            ("info",),  # 2.2
            ("wait", 1.0),
            ("info",),  # 3.5
        ],
    ),
    # +WPI restarts the ack wait.
    (
        {},
        [
            ("pull", "a", 10),  # 0
            ("pub", 1),  # 0.3: due at 1.3
            ("wait", 0.4),
            ("ack", 1, "+WPI"),  # 1.0: due at 2.0 instead
            ("wait", 0.4),
            ("info",),  # 1.7
            ("wait", 0.5),  # 2.0: again
            ("info",),  # 2.5
        ],
    ),
    # +TERM: gone from pending, with an advisory; the ack floor moves past it.
    (
        {},
        [
            ("pull", "a", 10),
            ("pub", 3),
            ("ack", 1, "+TERM gone bad"),
            ("ack", 3, "+TERM"),
            ("info",),
            ("ack", 2, "+ACK"),
            ("info",),
        ],
    ),
    # max_deliver: delivered twice, then an advisory and no more.
    (
        {"max_deliver": 2},
        [
            ("pull", "a", 10),  # 0
            ("pub", 2),  # 0.3
            ("ack", 2, "+ACK"),  # 0.6
            ("wait", 1.2),  # 0.9; seq 1 again at 1.3, given up at 2.3
            ("info",),  # 2.1
            ("wait", 1.0),
            ("info",),  # 3.4
            ("pub", 1),  # 3.7
            ("info",),  # 4.0
        ],
    ),
    # max_deliver reached with no request waiting.
    (
        {"max_deliver": 2},
        [
            ("pub", 1),  # 0
            ("pull", "a", 1, SEC // 2),  # 0.3: due at 1.3
            ("wait", 1.2),
            ("info",),  # 1.8
            ("pull", "b", 1, SEC // 2),  # 2.1: again, due at 3.1
            ("info",),  # 2.4
            ("wait", 1.0),
            ("info",),  # 3.7
        ],
    ),
    # max_deliver 1 and no request waiting.
    (
        {"max_deliver": 1},
        [
            ("pub", 2),  # 0
            ("pull", "a", 2, SEC // 2),  # 0.3: due at 1.3
            ("info",),  # 0.6
            ("wait", 1.2),
            ("info",),  # 2.1
            ("pull", "b", 2, SEC // 2),  # 2.4
            ("info",),  # 2.7
        ],
    ),
    # ... after a NAK with a delay (dropped as the delay ends) or without one (dropped
    # when its redelivery would go out).
    (
        {"max_deliver": 1},
        [
            ("pub", 2),  # 0
            ("pull", "a", 2, SEC // 2),  # 0.3: 2 due at 1.3
            ("ack", 1, "-NAK 500ms"),  # 0.6: due at 1.1
            ("ack", 2, "-NAK"),  # 0.9
            ("info",),  # 1.2
            ("wait", 0.6),
            ("info",),  # 2.1
            ("pull", "b", 2, SEC // 2),  # 2.4
            ("info",),  # 2.7
        ],
    ),
    # max_deliver reached through NAKs.
    (
        {"max_deliver": 2},
        [
            ("pull", "a", 10),
            ("pub", 1),
            ("ack", 1, "-NAK"),
            ("ack", 1, "-NAK"),
            ("info",),
            ("wait", 1.0),
            ("info",),
        ],
    ),
    # backoff: the waits between deliveries, the last one repeated; then max_deliver.
    (
        {"backoff": [SEC, 2 * SEC], "max_deliver": 4},
        [
            ("pull", "a", 10),  # 0
            ("pub", 1),  # 0.3; again at 1.3, 3.3, 5.3
            ("wait", 1.2),
            ("info",),  # 1.8
            ("wait", 1.4),
            ("info",),  # 3.5
            ("wait", 2.0),
            ("info",),  # 5.8
        ],
    ),
    # backoff after a -NAK and a +WPI: the wait for the delivery count reached.
    (
        {"backoff": [SEC, 2 * SEC], "max_deliver": 5},
        [
            ("pull", "a", 10),  # 0
            ("pub", 1),  # 0.3
            ("ack", 1, "-NAK"),  # 0.6: again at once, due at 2.6
            ("wait", 0.6),
            ("info",),  # 1.5
            ("ack", 1, "+WPI"),  # 1.8: due at 3.8
            ("info",),  # 2.1
            ("wait", 1.0),
            ("info",),  # 3.4
            ("wait", 0.4),  # 3.7; again at 3.8
            ("info",),  # 4.1
        ],
    ),
    # ack_policy all: an ack acks everything below it.
    (
        {"ack_policy": "all"},
        [
            ("pull", "a", 10),
            ("pub", 4),
            ("ack", 3, "+ACK"),
            ("info",),
            ("ack", 4, "-NAK"),
            ("info",),
        ],
    ),
    # ack_policy all after redeliveries.
    (
        {"ack_policy": "all"},
        [
            ("pull", "a", 10),  # 0
            ("pub", 4),  # 0.3; all again at 1.3
            ("wait", 1.2),
            ("info",),  # 1.8
            ("ack", 2, "+ACK"),  # 2.1
            ("info",),  # 2.4; 3 and 4 again at 2.3
            ("ack", 4, "+ACK"),  # 2.7
            ("info",),  # 3.0
        ],
    ),
    # ack_policy all from an earlier delivery's reply subject, at or below the floor.
    (
        {"ack_policy": "all", "ack_wait": 2 * SEC},
        [
            ("pull", "a", 10),  # 0
            ("pub", 3),  # 0.3; all again at 2.3
            ("wait", 2.0),
            ("ack", 1, "+ACK"),  # 2.6: the floor is its second delivery's (4)
            ("ack-first", 2, "+ACK"),  # 2.9: delivery 2, below the floor
            ("info",),  # 3.2
            ("ack-first", 3, "+ACK"),  # 3.5
            ("info",),  # 3.8; 2 and 3 again at 4.3
        ],
    ),
    # Out-of-order acks: the floor moves once the gap is filled.
    (
        {},
        [
            ("pull", "a", 10),  # 0
            ("pub", 4),  # 0.3
            ("ack", 2, "+ACK"),  # 0.6
            ("ack", 4, "+ACK"),  # 0.9
            ("info",),  # 1.2; 1 and 3 again at 1.3
            ("ack", 1, "+ACK"),  # 1.5
            ("info",),  # 1.8
            ("ack", 3, "+ACK"),  # 2.1
            ("info",),  # 2.4
        ],
    ),
    # Redeliveries go before new messages, held back by max_ack_pending.
    (
        {"max_ack_pending": 2, "ack_wait": 2 * SEC},
        [
            ("pub", 4),  # 0
            ("pull", "a", 3),  # 0.3: 1, 2
            ("ack", 2, "-NAK"),  # 0.6: 2 again (due 2.6)
            ("ack", 1, "+ACK"),  # 0.9
            ("info",),  # 1.2
            ("pull", "b", 5),  # 1.5: 3 (due 3.5)
            ("info",),  # 1.8
            ("wait", 0.7),  # 2.1; 2 again at 2.6
            ("info",),  # 2.8
            ("ack", 3, "+ACK"),  # 3.1: 4
            ("ack", 2, "+ACK"),  # 3.4
            ("info",),  # 3.7
        ],
    ),
    # An ack wait runs out with no request waiting: acked before it goes again.
    (
        {},
        [
            ("pub", 2),  # 0
            ("pull", "a", 2),  # 0.3: due at 1.3
            ("wait", 1.2),
            ("info",),  # 1.8
            ("ack", 1, "+ACK"),  # 2.1
            ("info",),  # 2.4
            ("pull", "b", 5),  # 2.7: 2 again
            ("info",),  # 3.0
        ],
    ),
    # Workqueue and interest streams: what acks, TERM and max_deliver leave stored.
    *(
        (
            {"retention": retention, "max_deliver": 2},
            [
                ("pull", "a", 10),  # 0
                ("pub", 4),  # 0.3; 2 and 4 due 1.3
                ("ack", 1, "+ACK"),  # 0.6
                ("ack", 2, "+TERM"),  # 0.9
                ("ack", 3, "-NAK"),  # 1.2: again, due at 2.2 (given up)
                ("info",),  # 1.5; 4 again at 1.3, due at 2.3 (given up)
                ("wait", 1.0),
                ("info",),  # 2.8
                ("ack", 4, "+ACK"),  # 3.1
                ("info",),  # 3.4
            ],
        )
        for retention in ("workqueue", "interest")
    ),
    # A pending message expires (max_age): gone from pending too.
    (
        {"max_age": 2 * SEC, "ack_wait": 1_500_000_000},
        [
            ("pull", "a", 10),  # 0
            ("pub", 2),  # 0.3: due at 1.8
            ("ack", 1, "+ACK"),  # 0.6
            ("info",),  # 0.9
            ("wait", 0.9),  # 1.2; 2 again at 1.8
            ("info",),  # 2.1; both expire at 2.3
            ("wait", 1.0),
            ("info",),  # 3.4 (the server's expiry can run a few tenths late)
            ("pub", 1),  # 3.7
            ("info",),  # 4.0
        ],
    ),
    # Pending messages deleted, dropped by max_msgs (a terminated advisory each), purged
    # (none).
    (
        {"max_msgs": 4},
        [
            ("pull", "a", 10),  # 0
            ("pub", 3),  # 0.3: due at 1.3
            ("delete", 2),  # 0.6
            ("wait", 0.6),  # 0.9; 1 and 3 again at 1.3
            ("info",),  # 1.5
            ("pub", 2),  # 1.8
            ("pub", 1),  # 2.1: 1 dropped
            ("info",),  # 2.4; 3 again at 2.3
            ("purge",),  # 2.7
            ("info",),  # 3.0
            ("pub", 1),  # 3.3
            ("info",),  # 3.6
        ],
    ),
    # An ephemeral consumer's inactive_threshold (1 s): from its creation ...
    (
        {"ephemeral": True, "inactive_threshold": SEC, "ack_wait": 30 * SEC},
        [
            ("pub", 1),  # 0
            ("info",),  # 0.3
            ("wait", 1.8),  # 0.6; deleted at 1.0 (the server: at 1.1-2.0)
            ("info",),  # 2.4
        ],
    ),
    # ... a waiting request keeps it, and it is still there as the request expires (the
    # server checks every 1.1-2 s: a check while the request waits puts the next one past
    # 2.2; the store counts from the expiry) ...
    (
        {"ephemeral": True, "inactive_threshold": SEC, "ack_wait": 30 * SEC},
        [
            ("pull", "a", 1, 2 * SEC),  # 0: expires at 2.0
            ("wait", 1.2),
            ("info",),  # 1.5
            ("wait", 0.3),
            ("info",),  # 2.1
            ("wait", 1.8),
            ("info",),  # 4.2 (deleted at 3.0; the server at 2.2-4.0)
        ],
    ),
    # ... messages waiting for their acks keep it until their ack wait ends ...
    (
        {"ephemeral": True, "inactive_threshold": SEC, "ack_wait": 2 * SEC, "max_deliver": 1},
        [
            ("pub", 2),  # 0
            ("pull", "a", 2, SEC),  # 0.3: filled, due at 2.3
            ("info",),  # 0.6
            ("wait", 1.0),
            ("info",),  # 1.9
            ("wait", 3.0),
            ("info",),  # 5.2 (the store deletes it at 3.3, the server at 3.4-4.3)
        ],
    ),
    # ... and acks with nothing waiting.
    (
        {"ephemeral": True, "inactive_threshold": SEC, "ack_wait": 30 * SEC},
        [
            ("pub", 3),  # 0
            ("pull", "a", 3, SEC),  # 0.3: filled
            ("wait", 0.5),
            ("ack", 1, "+ACK"),  # 1.1
            ("info",),  # 1.4
            ("ack", 2, "-NAK 30s"),  # 1.7
            ("info",),  # 2.0
            ("ack", 3, "+WPI"),  # 2.3
            ("info",),  # 2.6
            ("wait", 1.1),
            ("info",),  # 4.0
        ],
    ),
    # A push consumer: deliveries and redeliveries while its deliver subject has a
    # subscriber, none while it has none; what fell due meanwhile goes when one comes.
    (
        {"push": True},
        [
            ("pub", 2),  # 0
            ("bind",),  # 0.3: delivered, due at 1.3
            ("info",),  # 0.6
            ("wait", 1.0),  # 0.9; again at 1.3, due at 2.3
            ("unbind",),  # 1.9
            ("wait", 1.0),  # 2.2
            ("info",),  # 3.2
            ("bind",),  # 3.5: again
            ("pub", 1),  # 3.8
            ("ack", 1, "+ACK"),  # 4.1
            ("info",),  # 4.4
        ],
    ),
    # ... held back by max_ack_pending, each ack lets one more go.
    (
        {"push": True, "max_ack_pending": 2, "ack_wait": 5 * SEC},
        [
            ("pub", 4),  # 0
            ("bind",),  # 0.3: 1 and 2
            ("info",),  # 0.6
            ("ack", 1, "+ACK"),  # 0.9: 3
            ("ack", 3, "+ACK"),  # 1.2: 4
            ("info",),  # 1.5
        ],
    ),
    # An update of ack_wait: the messages already out wait for the new one.
    (
        {"ack_wait": 5 * SEC},
        [
            ("pull", "a", 10),  # 0
            ("pub", 1),  # 0.3
            ("update", {"ack_wait": SEC}),  # 0.6
            ("wait", 0.6),
            ("info",),  # 1.5
            ("pub", 1),  # 1.8
            ("info",),  # 2.1
        ],
    ),
    # +WPI on a message whose ack wait ended with no request waiting; an ack twice; an
    # ack to the reply subject of an earlier delivery.
    (
        {},
        [
            ("pub", 3),  # 0
            ("pull", "a", 1),  # 0.3: due at 1.3
            ("wait", 1.2),
            ("ack", 1, "+WPI"),  # 1.8: due at 2.8
            ("pull", "b", 3, SEC // 2),  # 2.1: 2 and 3, due at 3.1; 408 at 2.6
            ("info",),  # 2.4
            ("ack", 1, "+ACK"),  # 2.7
            ("ack", 1, "+ACK"),  # 3.0
            ("info",),  # 3.3
            ("pull", "c", 5, SEC // 2),  # 3.6: 2 and 3 again
            ("ack-first", 2, "+ACK"),  # 3.9
            ("info",),  # 4.2
        ],
    ),
    # Acks for messages given up on (max_deliver): a TERM is advised all the same; the
    # ack floor does not move.
    (
        {"max_deliver": 1},
        [
            ("pub", 3),  # 0
            ("pull", "a", 3),  # 0.3: due at 1.3, given up then
            ("wait", 1.2),
            ("ack", 1, "+TERM late"),  # 1.8
            ("ack", 2, "+ACK"),  # 2.1
            ("ack", 3, "-NAK"),  # 2.4
            ("info",),  # 2.7
        ],
    ),
    # An ack just above the floor moves it past messages given up on.
    (
        {"max_deliver": 1},
        [
            ("pub", 3),  # 0
            ("pull", "a", 3),  # 0.3: due at 1.3
            ("ack", 1, "+WPI"),  # 0.6: due at 1.6
            ("info",),  # 0.9
            ("wait", 0.3),  # 1.2; 2 and 3 given up at 1.3
            ("ack", 1, "+ACK"),  # 1.5
            ("info",),  # 1.8
        ],
    ),
    # A NAK delay with backoff: the delay, then the backoff of the delivery count.
    (
        {"backoff": [SEC, 3 * SEC], "max_deliver": 4},
        [
            ("pull", "a", 5),  # 0
            ("pub", 1),  # 0.3: due at 1.3
            ("ack", 1, "-NAK 500ms"),  # 0.6: again at 1.1, due at 4.1
            ("info",),  # 0.9
            ("wait", 0.6),
            ("info",),  # 1.8
            ("wait", 1.6),
            ("info",),  # 3.7
        ],
    ),
    # A filtered consumer: messages it does not take around and between its own. (Not
    # compared before its first ack: the store's floor is past the messages it does not
    # take, by spec §1.7, the server's not — store/DESIGN.md.)
    (
        {"filtered": True},
        [
            ("pull", "a", 10),  # 0
            ("pub-y", 2),  # 0.3
            ("pub", 2),  # 0.6: 3 and 4, due at 1.6
            ("pub-y", 1),  # 0.9
            ("ack", 3, "+ACK"),  # 1.2
            ("wait", 0.6),  # 1.5; 4 again at 1.6, due at 2.6
            ("info",),  # 2.1
            ("pub", 1),  # 2.4: 6, due at 3.4
            ("ack", 4, "+ACK"),  # 2.7
            ("info",),  # 3.0
            ("delete", 6),  # 3.3
            ("info",),  # 3.6
        ],
    ),
    # A message deleted, or purged, while waiting for its ack leaves pending at once.
    (
        {"ack_wait": 5 * SEC},
        [
            ("pull", "a", 10),  # 0
            ("pub", 3),  # 0.3
            ("delete", 2),  # 0.6
            ("info",),  # 0.9
            ("purge",),  # 1.2
            ("info",),  # 1.5
            ("pub", 1),  # 1.8
            ("info",),  # 2.1
        ],
    ),
    # +NXT with a JSON batch; a JSON NAK delay under backoff; TERM of a redelivered one.
    (
        {"backoff": [SEC, 2 * SEC], "max_deliver": 5},
        [
            ("pub", 4),  # 0
            ("pull", "a", 1),  # 0.3: 1
            ("ack", 1, '+NXT {"batch": 2}', "n"),  # 0.6: 2 and 3, due at 1.6
            ("ack", 2, '-NAK {"delay": 500000000}'),  # 0.9: due at 1.4
            ("wait", 0.8),  # 1.2
            ("pull", "b", 5),  # 2.0: 2 and 3 again (due at 4.0), 4 (due at 3.0)
            ("info",),  # 2.3
            ("ack", 3, "+TERM done"),  # 2.6
            ("info",),  # 2.9
        ],
    ),
    # Messages expiring before the consumer takes them: num_pending follows. (The floor
    # before the first ack is not compared: store/DESIGN.md, spec §1.7.)
    (
        {"max_age": SEC, "filtered": True},
        [
            ("pub", 2),  # 0: expire at 1.0
            ("pub-y", 1),  # 0.3: at 1.3
            ("info",),  # 0.6
            ("wait", 1.2),  # (the server's expiry can run a few tenths late)
            ("info",),  # 2.1
            ("pub", 1),  # 2.4: expires at 3.4
            ("info",),  # 2.7
            ("wait", 1.5),
            ("pull", "a", 5, SEC // 2),  # 4.5: 408 at 5.0
            ("info",),  # 4.8
            ("pub", 1),  # 5.1
            ("pull", "b", 5),  # 5.4: 5
            ("ack", 5, "+ACK"),  # 5.7
            ("info",),  # 6.0
        ],
    ),
    # +NXT: the ack, then the next messages to the inbox it names.
    (
        {},
        [
            ("pub", 3),
            ("pull", "a", 1),
            ("ack", 1, "+NXT", "n"),
            ("ack", 2, "+NXT 2", "m"),
            ("info",),
        ],
    ),
]


STREAM_KEYS = ("retention", "max_age", "max_msgs")  # the scenario's keys for the stream's config


def _stream_config(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "subjects": [f"{name}.>"]} | {
        k: v for k, v in cfg.items() if k in STREAM_KEYS
    }


def _consumer_config(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The consumer's config: durable "c" unless ``ephemeral`` (then named "c"); with
    ``push``, its deliver subject is the inbox "push"; ``filtered``: only "<stream>.x"
    (the "pub" step's subject; "pub-y" publishes others)."""
    base: dict[str, Any] = {"ack_policy": "explicit", "ack_wait": SEC}
    base |= {"name": "c"} if cfg.get("ephemeral") else {"durable_name": "c"}
    if cfg.get("push"):
        base["deliver_subject"] = f"in.{name}.push"
    if cfg.get("filtered"):
        base["filter_subject"] = f"{name}.x"
    scenario_keys = (*STREAM_KEYS, "ephemeral", "push", "filtered")
    rest = {k: v for k, v in cfg.items() if k not in scenario_keys}
    return base | rest


def _info_text(d: dict[str, Any], stream: dict[str, Any]) -> str:
    st = stream["state"]
    head = f"stream {st['messages']} {st['first_seq']}..{st['last_seq']}; "
    if "error" in d:  # the consumer is gone
        return head + f"consumer {d['error']['err_code']} {d['error']['description']}"
    dl, fl = d["delivered"], d["ack_floor"]
    return (
        head + f"delivered {dl['consumer_seq']}/{dl['stream_seq']}"
        f" floor {fl['consumer_seq']}/{fl['stream_seq']}"
        f" ack_pending {d.get('num_ack_pending', 0)}"
        f" redelivered {d.get('num_redelivered', 0)}"
        f" pending {d.get('num_pending', 0)} waiting {d.get('num_waiting', 0)}"
        + (" bound" if d.get("push_bound") else "")
    )


def _moments(steps: list[Step]) -> list[float]:
    """Each step's moment on the timeline, in seconds; then the end."""
    t, out = 0.0, []
    for step in steps:
        out.append(t)
        t += step[1] if step[0] == "wait" else STEP_S
    out.append(t)
    return out


async def _on_server(nc: Client, name: str, cfg: dict[str, Any], steps: list[Step]) -> Outcomes:
    await nc.request(
        f"$JS.API.STREAM.CREATE.{name}",
        json.dumps(_stream_config(name, cfg)).encode(),
        timeout=10,
    )
    ccfg = _consumer_config(name, cfg)
    await nc.request(
        f"$JS.API.CONSUMER.CREATE.{name}.c",
        json.dumps({"stream_name": name, "config": ccfg}).encode(),
        timeout=10,
    )
    out: Outcomes = {"info": [], "advisories": []}
    acks: dict[int, str] = {}  # stream seq -> the reply subject of its latest delivery
    firsts: dict[int, str] = {}  # ... of its first delivery

    async def advisory(msg: Msg) -> None:
        d = json.loads(msg.data)
        kind = "terminated" if ".MSG_TERMINATED." in msg.subject else "max_deliver"
        reason = f" {d['reason']}" if d.get("reason") else ""
        out["advisories"].append(f"{kind} {d['stream_seq']} {d['deliveries']}{reason}")

    for kind in ("MAX_DELIVERIES", "MSG_TERMINATED"):
        await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.{kind}.{name}.c", cb=advisory)

    def inbox(name_: str) -> str:
        return f"in.{name}.{name_}"

    async def subscribe(box: str) -> Subscription:
        got = out.setdefault(box, [])

        async def cb(msg: Msg) -> None:
            headers = msg.headers or {}
            if "Status" in headers:
                got.append(f"{headers['Status']} {headers.get('Description', '')}")
            else:
                md = msg.metadata
                got.append(f"{md.sequence.stream}#{md.num_delivered}")
                acks[md.sequence.stream] = msg.reply
                firsts.setdefault(md.sequence.stream, msg.reply)

        return await nc.subscribe(inbox(box), cb=cb)

    bound: Subscription | None = None  # a push consumer's subscriber
    loop = asyncio.get_running_loop()
    start = loop.time()
    moments = _moments(steps)
    for step, at in zip(steps, moments, strict=False):
        await asyncio.sleep(max(0.0, start + at - loop.time()))
        if step[0] == "pull":
            await subscribe(step[1])
            body = {"batch": step[2], "expires": step[3] if len(step) > 3 else WAIT_NS}
            await nc.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{name}.c",
                json.dumps(body).encode(),
                reply=inbox(step[1]),
            )
        elif step[0] in ("pub", "pub-y"):
            for _ in range(step[1]):
                await nc.request(f"{name}.{'y' if step[0] == 'pub-y' else 'x'}", b"m", timeout=10)
        elif step[0] == "ack":
            reply = ""
            if len(step) > 3:
                await subscribe(step[3])
                reply = inbox(step[3])
            await nc.publish(acks[step[1]], step[2].encode(), reply=reply)
        elif step[0] == "ack-first":
            await nc.publish(firsts[step[1]], step[2].encode())
        elif step[0] == "update":
            body = {"stream_name": name, "config": ccfg | step[1], "action": "update"}
            await nc.request(
                f"$JS.API.CONSUMER.CREATE.{name}.c", json.dumps(body).encode(), timeout=10
            )
        elif step[0] == "bind":
            bound = await subscribe("push")
        elif step[0] == "unbind":
            assert bound is not None
            await bound.unsubscribe()
        elif step[0] == "delete":
            seq = json.dumps({"seq": step[1]}).encode()
            await nc.request(f"$JS.API.STREAM.MSG.DELETE.{name}", seq, timeout=10)
        elif step[0] == "purge":
            await nc.request(f"$JS.API.STREAM.PURGE.{name}", b"", timeout=10)
        elif step[0] == "info":
            info = await nc.request(f"$JS.API.CONSUMER.INFO.{name}.c", b"", timeout=10)
            sinfo = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=10)
            out["info"].append(_info_text(json.loads(info.data), json.loads(sinfo.data)))
        await nc.flush()
    await asyncio.sleep(max(0.0, start + moments[-1] - loop.time()))
    answered = {k: list(v) for k, v in out.items()}  # (the deletion answers the rest 409)
    answered["advisories"].sort()  # (the server's for one moment come in any order)
    await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)
    return answered


def _on_store(path: Path, name: str, cfg: dict[str, Any], steps: list[Step]) -> Outcomes:
    """The steps on our store, acks parsed from the delivery's reply subject and payload
    as the broker parses them."""
    clock, events = FakeClock(), Events()
    out: Outcomes = {"info": [], "advisories": []}
    acks: dict[int, str] = {}
    firsts: dict[int, str] = {}

    def inbox(name_: str) -> str:
        return f"in.{name}.{name_}"

    with Store.open(path, sync="batch", clock=clock, on_event=events) as s:
        s.create_stream(_stream_config(name, cfg))
        s.create_consumer(name, _consumer_config(name, cfg))

        def take_events() -> None:
            for e in events.take():
                if isinstance(e, Delivery):
                    out[e.reply.rpartition(".")[2]].append(f"{e.msg.seq}#{e.delivered_count}")
                    acks[e.msg.seq] = e.ack_subject
                    firsts.setdefault(e.msg.seq, e.ack_subject)
                elif isinstance(e, PullStatus):
                    out[e.reply.rpartition(".")[2]].append(f"{e.code} {e.description}")
                elif isinstance(e, Advisory) and e.kind in ("terminated", "max_deliver"):
                    reason = f" {e.reason}" if e.reason else ""
                    out["advisories"].append(f"{e.kind} {e.stream_seq} {e.deliveries}{reason}")

        moments = _moments(steps)
        # Where the server acts (and, last, reads what came): no timer may fall due near.
        acting = [
            T0 + round(t * SEC)
            for t, st in zip(moments, [*steps, ("end",)], strict=True)
            if st[0] != "wait"
        ]

        def move_to(at: float) -> None:
            until = T0 + round(at * SEC)
            while (due := s.next_deadline()) is not None and due <= until:
                near = [a for a in acting if abs(a - due) < MARGIN_NS]
                assert not near, f"{name}: a timer at {(due - T0) / SEC:.2f} s, near a step"
                clock.now = max(clock.now, due)
                s.tick(clock.now).result(timeout=30)
                take_events()
            clock.now = until

        for step, at in zip(steps, moments, strict=False):
            move_to(at)
            if step[0] == "pull":
                out.setdefault(step[1], [])
                expires = step[3] if len(step) > 3 else WAIT_NS
                s.pull(name, "c", inbox(step[1]), batch=step[2], expires_ns=expires)
            elif step[0] in ("pub", "pub-y"):
                for _ in range(step[1]):
                    s.publish(f"{name}.{'y' if step[0] == 'pub-y' else 'x'}", b"m")
            elif step[0] == "ack":
                reply = ""
                if len(step) > 3:
                    out.setdefault(step[3], [])
                    reply = inbox(step[3])
                op = ack_from_payload(parse_ack_reply(acks[step[1]]), step[2].encode(), reply)
                s.submit([op]).result(timeout=30)
            elif step[0] == "ack-first":
                op = ack_from_payload(parse_ack_reply(firsts[step[1]]), step[2].encode())
                s.submit([op]).result(timeout=30)
            elif step[0] == "update":
                s.create_consumer(name, _consumer_config(name, cfg) | step[1], action="update")
            elif step[0] in ("bind", "unbind"):
                out.setdefault("push", [])
                s.set_push_interest(name, "c", step[0] == "bind")
            elif step[0] == "delete":
                s.delete_msg(name, step[1])
            elif step[0] == "purge":
                s.purge_stream(name)
            elif step[0] == "info":
                try:
                    cinfo = s.consumer_info(name, "c").to_wire()
                except JetStreamError as e:
                    cinfo = {"error": e.to_wire()}
                out["info"].append(_info_text(cinfo, s.stream_info(name).to_wire()))
            take_events()
        move_to(moments[-1])
        take_events()
    out["advisories"].sort()
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_acks_and_redeliveries_answer_as_nats_server_does(tmp_path: Path) -> None:
    compare_timed(tmp_path, "R", SCENARIOS, _on_server, _on_store, at_once=True)

"""What a connection sends: direct sends at the end of a reader's chunk, the writer task
started on first need, queued QoS 1/2 copies moved into the client's Receive Maximum
window, and the ordered pipeline of acknowledgements that wait for a store commit.

One ``Output`` per connection, composed into :class:`broker.net.connection.ClientConnection`
(see that module's docstring for the tasks of a connection).
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import trio

from broker.core.message import AppMessage, Outgoing
from broker.mqtt.connection import ConnectionState
from broker.mqtt.errors import PacketTooLargeError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Packet
from broker.mqtt.reason_codes import ReasonCode
from broker.net.transport import Transport
from broker.persist.client import StorageError, wait_future

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.core.ports import Plan
    from broker.core.stats import Stats
    from broker.net.link import Link
    from broker.persist.state import Persistence

log = logging.getLogger("jetmq.client")

_CLOSED: Final = ConnectionState.CLOSED
FILL_BATCH: Final = 256  # packets moved from a session queue per flush
FLUSH_TIMEOUT: Final = 2.0

# What a step waits for: nothing, a store plan's commit (a callback) or an async callable.
Wait: TypeAlias = "Plan | Callable[[], Awaitable[Any]] | None"
# (wait for this, then do this, or do that if the wait failed: None = disconnect)
Step = tuple[Wait, Callable[[], None], Callable[[], None] | None]
NOT_STORED: Final = "the broker could not store it"


class Output:
    """The sending half of one connection."""

    _wake: trio.Event
    writer_done: trio.Event

    __slots__ = (
        "_armed",
        "_idle",
        "_in_batch",
        "_room",
        "_steps",
        "_wake",
        "conn",
        "host",
        "hub",
        "out",
        "persist",
        "proto",
        "qos0_pending",
        "stats",
        "transport",
        "writer_done",
        "writer_scope",
    )

    def __init__(self, conn: Link, transport: Transport) -> None:
        self.conn = conn
        host = self.host = conn.broker  # per-copy paths read the broker's batch and limits
        # The broker's parts that never change, typed: a read of them is native (compiled),
        # where one through the Host protocol is a generic attribute lookup.
        self.hub: Hub = host.hub
        self.persist: Persistence = host.persist
        self.stats: Stats = host.stats
        self.proto = conn.proto  # the codec machine (created before its Output)
        self.transport = transport
        self.out: list[bytes] = []  # encoded packets not yet written
        self.qos0_pending = 0
        self._idle = False  # the writer waits for a wake-up with nothing in hand
        self._in_batch = False
        # The writer, started on first need (an idle connection never has one), and its
        # two events, made with it: _wake and writer_done exist once writer_scope does.
        self.writer_scope: trio.CancelScope | None = None
        # The ordered pipeline, created on first need (most connections never wait): steps
        # in arrival order; _armed: a callback or task will pump the head step.
        self._steps: collections.deque[Step] | None = None
        self._armed = False
        self._room: trio.Event | None = None  # the reader waits for the steps to shrink

    def at_rest(self) -> bool:
        """Nothing in progress: nothing unsent, no acknowledgement waiting for a commit,
        and no writer or an idle one (the connection may park; see ``broker.net.parking``)."""
        return (
            not self.out
            and not self._steps
            and (self.writer_scope is None or self._idle)
            and not self._in_batch
        )

    def close_soon(self) -> None:
        """Stop reading; what is queued is flushed and the connection closes."""
        self.conn.closing = True
        self.conn.stop_reading()
        if self.writer_scope is not None:
            self._wake.set()

    def end(self) -> None:
        """The connection is gone: no writer. Steps already queued still run when their
        waits end (a commit is applied; what they send is dropped)."""
        if self.writer_scope is not None:
            self.writer_scope.cancel()
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    async def flush_on_close(self) -> None:
        """Send what is left when the connection closes (the caller bounds the time)."""
        if self.writer_scope is not None:
            self._wake.set()
            await self.writer_done.wait()
        elif self.out:
            data = b"".join(self.out)
            self.out = []
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.transport.send_all(data)

    # == sending ================================================================================

    def send(self, packet: Packet) -> None:
        if self.conn.closing or self.proto.state is _CLOSED:
            return
        try:
            self.out.append(self.proto.send(packet))
        except PacketTooLargeError:
            return  # the client's Maximum Packet Size forbids it [MQTT-3.1.2-24]
        self.stats.control_sent += 1
        self.wake()

    def send_puback(self, packet_id: int) -> None:
        """``send(Puback(packet_id))`` through the machine's shortcut (4 bytes: never
        above the client's Maximum Packet Size)."""
        if self.conn.closing or self.proto.state is _CLOSED:
            return
        self.out.append(self.proto.send_puback(packet_id))
        self.stats.control_sent += 1
        self.wake()

    def taken_over(self) -> None:
        """Another connection took this client id (the core's Peer)."""
        self.conn.taken_over()

    def wake(self) -> None:
        """There is something to send (also the core's Peer: queued copies). Inside a
        reader's chunk it waits for the chunk's end (``Broker.flush_batch``: one write per
        connection, no task switch); otherwise the writer task is woken."""
        batch = self.host.batch
        if batch is None:
            self.kick()
        elif not self._in_batch:
            self._in_batch = True
            batch.append(self.flush_direct)

    def kick(self) -> None:
        """Wake the writer, starting it on first need. Before CONNACK and once closing
        there is none to start: ``run`` sends what is left itself."""
        if self.writer_scope is None:
            if self.conn.closing or self.conn.session is None:
                return
            self.writer_scope = trio.CancelScope()
            self._wake = trio.Event()
            self.writer_done = trio.Event()
            self.host.spawn(self.writer)
        self._wake.set()

    def flush_direct(self) -> None:
        """Send what is pending from the calling task when nothing is ahead of it (no
        writer, or an idle one), moving queued copies into the window first; what the
        kernel does not take, or a copy that needs a commit first, goes to the writer."""
        self._in_batch = False
        if (
            self.transport.raw is None
            or self.conn.closing
            or (self.writer_scope is not None and not self._idle)
        ):
            self.kick()
            return
        more = False
        session = self.conn.session
        if session is not None and (session.queue or session.backlog):
            self.out.extend(self.take(None))
            more = bool(session.queue) and self.proto.can_send_qos_message()
        if not self.out:
            if more:
                self.kick()
            return
        out = self.out
        data = out[0] if len(out) == 1 else b"".join(out)
        self.out = []
        self.qos0_pending = 0
        sent = self.transport.send_now(data)
        if sent < 0:
            self.close_soon()
            return
        self.stats.bytes_sent += sent
        if sent < len(data):
            self.out.append(data[sent:])
            self.kick()
        elif more:
            self.kick()

    def send_qos0(
        self, msg: AppMessage, retain: bool, sub_ids: tuple[int, ...], now: float
    ) -> None:
        """A QoS 0 copy: bytes built once per shape and shared by recipients."""
        if self.conn.closing or self.proto.state is _CLOSED:
            return
        if self.qos0_pending >= self.host.settings.max_outbound_queue:
            self.stats.publish_dropped += 1
            return  # slow consumer: QoS 0 is dropped rather than buffered without bound
        enc = msg.encoded_for(self.conn.version, now)
        if enc is None:
            return  # expired [MQTT-3.3.2-5]
        try:
            data = self.proto.send_publish(
                enc, qos=0, retain=retain, subscription_identifiers=sub_ids
            )
        except PacketTooLargeError:
            return
        self.out.append(data)
        self.qos0_pending += 1
        self.stats.publish_sent += 1
        self.wake()

    def plain_qos0_version(self) -> ProtocolVersion | None:
        """This connection's protocol version when it takes plain QoS 0 copies now
        (``broker.mqtt.encoder.plain_qos0``: what ``send_qos0`` would send of a message
        without properties, retain or subscription identifiers); None otherwise."""
        if self.conn.closing or not self.proto.takes_plain_qos0():
            return None
        return self.conn.version

    def send_plain_qos0(self, data: bytes) -> None:
        """``send_qos0`` of a plain QoS 0 copy already encoded (``broker.net.runs``)."""
        if self.conn.closing or self.proto.state is _CLOSED:
            return
        host = self.host
        if self.qos0_pending >= host.settings.max_outbound_queue:
            host.stats.publish_dropped += 1
            return  # as send_qos0: a slow consumer's QoS 0 is dropped
        if len(data) > self.proto.peer_maximum_packet_size:
            return  # as send_qos0: too large for this client [MQTT-3.1.2-24]
        self.out.append(data)
        self.qos0_pending += 1
        host.stats.publish_sent += 1
        self.wake()

    def take(self, staged: list[tuple[Outgoing, int, int]] | None) -> list[bytes]:
        """Move queued copies into the client's Receive Maximum window, in order, and
        return their bytes: at most ``FILL_BATCH`` packets, so a busy session still sends
        while new copies keep arriving.

        A QoS 2 copy of a persistent session has its packet id recorded in a commit
        before its bytes may go out: it is listed in ``staged`` for the caller to commit,
        or, with ``staged`` None (a direct flush, which cannot wait), left queued.
        """
        session = self.conn.session
        assert session is not None
        proto = self.proto
        if proto.closed:
            return []  # a protocol error ended the exchange: the copies stay queued
        persist = self.persist
        queue = session.queue
        now = self.hub.now()
        ready: list[bytes] = []
        while queue and len(ready) < FILL_BATCH:
            og = queue[0]
            if og.qos and not proto.can_send_qos_message():
                break
            if staged is None and og.qos == 2 and og.pend_seq:
                break
            queue.popleft()
            session.queued_bytes -= len(og.message.payload)
            access = session.access
            if access is not None and not access.may_read(og.message.topic):
                persist.copy_done(session, og)  # queued before the ACL denied it
                continue
            enc = og.message.encoded_for(self.conn.version, now)
            if enc is None:  # expired while waiting [MQTT-3.3.2-5]
                persist.copy_done(session, og)
                continue
            pid = proto.next_packet_id() if og.qos else None
            try:
                data = proto.send_publish(
                    enc,
                    qos=og.qos,
                    retain=og.retain,
                    packet_id=pid,
                    subscription_identifiers=og.sub_ids,
                )
            except PacketTooLargeError:
                persist.copy_done(session, og)  # skipped as if delivered [MQTT-3.1.2-25]
                continue
            ready.append(data)
            if pid is not None:
                session.outgoing[pid] = og
                if og.qos == 2 and og.pend_seq:
                    assert staged is not None
                    staged.append((og, pid, 0))
        if ready:
            self.stats.publish_sent += len(ready)
        if session.retained_backlog is not None:
            self.hub.refill_retained(session)
        if session.backlog:  # copies waiting on disk: the next page is read in time
            self.hub.queues.page_soon(session)
        return ready

    async def fill(self) -> None:
        """The writer's move of queued copies (:meth:`_take`), committing staged ones."""
        session = self.conn.session
        if session is None:
            return
        staged: list[tuple[Outgoing, int, int]] = []
        ready = self.take(staged)
        if staged:
            persist = self.persist
            fut = persist.stage_copies(session, staged)
            assert fut is not None
            persist.stages_committed(staged, await wait_future(fut))
        self.out.extend(ready)
        if session.queue and self.proto.can_send_qos_message():
            self._wake.set()  # more to send after this flush

    async def writer(self) -> None:
        """Started by :meth:`_kick` in the broker's nursery; ended by ``run`` (closing
        flushes first) or by a failed send, which closes the connection."""
        scope = self.writer_scope
        assert scope is not None
        try:
            with scope:
                while True:
                    self._idle = not self.out
                    await self._wake.wait()  # a checkpoint even when already set
                    self._idle = False
                    self._wake = trio.Event()
                    if not self.conn.closing:
                        try:
                            await self.fill()
                        except StorageError:
                            self.storage_failed()
                    if self.out:
                        out = self.out
                        self.out = []
                        self.qos0_pending = 0
                        data = out[0] if len(out) == 1 else b"".join(out)
                        try:
                            # The kernel first; only what it does not take waits (trio's
                            # send_all, two scheduler checkpoints per call, dominated
                            # fan-out to many connections).
                            await self.transport.send_all(data)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            self.conn.closing = True
                            self.conn.stop_reading()
                            return
                        self.stats.bytes_sent += len(data)
                    if self.conn.closing and not self.out:
                        return
        finally:
            self.writer_done.set()

    def storage_failed(self) -> None:
        """A commit this connection waited for failed (logged by ``broker.persist``): close
        it (0x80); the client's unacknowledged packets are sent again after it reconnects."""
        self.conn.disconnect(ReasonCode.UNSPECIFIED_ERROR, NOT_STORED)

    # == the ordered pipeline ===================================================================

    def idle(self) -> bool:
        """No step is waiting: a step with nothing to wait for would run at once."""
        return not self._steps

    def last_step(self) -> Callable[[], None] | None:
        """The ``then`` of the last step waiting (None: idle): a stored run joins its
        messages to its own step while nothing was queued behind it."""
        steps = self._steps
        return steps[-1][1] if steps else None

    def congested(self) -> bool:
        """So many steps wait that the reader should stop reading (it awaits
        :meth:`uncongested`): a client that floods requests whose commits lag."""
        steps = self._steps
        return steps is not None and len(steps) >= self.host.settings.receive_maximum + 256

    async def uncongested(self) -> None:
        while self.congested() and not self.conn.closing:
            event = self._room = trio.Event()
            await event.wait()

    def step(
        self, wait: Wait, then: Callable[[], None], failed: Callable[[], None] | None = None
    ) -> None:
        """Run ``then`` once ``wait`` is done, in the order of the steps; if it failed,
        ``failed`` instead (None: the connection is closed, 0x80). ``wait``: None
        (nothing), a store plan (its commit: a callback, no task), or an async callable
        (awaited by a task of the broker's nursery). Never suspends the caller."""
        steps = self._steps
        if not steps:
            if wait is None:
                then()
                return
            if steps is None:
                steps = self._steps = collections.deque()
        steps.append((wait, then, failed))
        if len(steps) == 1:
            self._pump()

    def _pump(self) -> None:
        """Run the steps at the head whose wait is over; for the first that is not, make
        sure something calls back when it is (its plan's batch, or a task)."""
        steps = self._steps
        assert steps is not None
        while steps:
            wait, then, failed = steps[0]
            if wait is not None:
                if self._armed:
                    return
                if callable(wait):
                    self._armed = True
                    self.host.spawn(self._await_head, wait)
                    return
                ok = wait.settled()
                if ok is None:
                    self._armed = True
                    wait.on_finish(self._finished)
                    return
                if not ok:
                    then = failed or self.storage_failed
            steps.popleft()
            then()
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    def _finished(self, _ok: bool) -> None:
        """(trio thread, a store batch's completion) The head step's commit is done: run
        what it allows, sending the output straight from here (no task woken)."""
        self._armed = False
        self._pump_guarded()

    async def _await_head(self, wait: Callable[[], Awaitable[Any]]) -> None:
        """The task of a head step whose wait is an async callable; owned by the broker's
        nursery, so a commit already submitted is applied even if this connection dies
        meanwhile (its acknowledgements are then not sent)."""
        try:
            await wait()
        except StorageError:
            steps = self._steps
            assert steps is not None
            _wait, _then, failed = steps[0]
            steps[0] = (None, failed or self.storage_failed, None)
        else:
            steps = self._steps
            assert steps is not None
            steps[0] = (None, steps[0][1], None)
        self._armed = False
        self._pump_guarded()

    def _pump_guarded(self) -> None:
        """:meth:`_pump` outside a reader's chunk: its output goes out at the end, one write
        per connection; a bug closes this connection only."""
        host = self.host
        outer = host.batch is None
        if outer:
            host.batch = []
        try:
            self._pump()
        except Exception:
            log.exception("internal error after a commit; closing the client's connection")
            self.conn.disconnect(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")
        finally:
            if outer:
                host.flush_batch()

"""What a connection sends: direct sends at the end of a reader's chunk, the writer task
started on first need, queued QoS 1/2 copies moved into the client's Receive Maximum
window, and the ordered pipeline of acknowledgements that wait for a store commit.

A mixin of :class:`broker.client.ClientConnection` (which owns the attributes declared
here); see that module's docstring for the tasks of a connection.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from broker.message import AppMessage, Outgoing
from broker.mqtt.connection import Connection
from broker.mqtt.errors import PacketTooLargeError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Packet
from broker.mqtt.reason_codes import ReasonCode
from broker.persist import StorageError, wait_future
from broker.sessions import Session

if TYPE_CHECKING:
    from broker.core import Broker

FILL_BATCH = 256  # packets moved from a session queue per flush
FLUSH_TIMEOUT = 2.0

# (wait for a commit, then do this, or do that if the commit failed: None = disconnect)
Step = tuple[Callable[[], Awaitable[Any]] | None, Callable[[], None], Callable[[], None] | None]
NOT_STORED = "the broker could not store it"


class Output:
    """The sending half of a connection."""

    broker: Broker
    proto: Connection
    version: ProtocolVersion
    session: Session | None
    stream: trio.abc.Stream | None
    _raw: socket.socket | None
    _out: list[bytes]
    _qos0_pending: int
    _wake: trio.Event
    _idle: bool
    _in_batch: bool
    _closing: bool
    _writer_done: trio.Event
    _writer_scope: trio.CancelScope | None
    _steps_send: trio.MemorySendChannel[Step] | None
    _steps_pending: int

    if TYPE_CHECKING:  # ClientConnection's

        def _stop_reading(self) -> None: ...

        def _disconnect(self, code: ReasonCode, reason: str) -> None: ...

    async def _send_all(self, data: bytes | memoryview) -> None:
        """Everything in ``data``, waiting for the socket as needed."""
        raw = self._raw
        if raw is None:
            assert self.stream is not None
            await self.stream.send_all(data)
            return
        view = memoryview(data)
        while view:
            try:
                sent = raw.send(view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(raw)
                continue
            except OSError as exc:
                if raw.fileno() == -1:
                    raise trio.ClosedResourceError from None
                raise trio.BrokenResourceError from exc
            view = view[sent:]

    def _close_soon(self) -> None:
        """Stop reading; what is queued is flushed and the connection closes."""
        self._closing = True
        self._stop_reading()
        if self._writer_scope is not None:
            self._wake.set()

    # == sending ================================================================================

    def _send(self, packet: Packet) -> None:
        if self._closing or self.proto.closed:
            return
        try:
            self._out.append(self.proto.send(packet))
        except PacketTooLargeError:
            return  # the client's Maximum Packet Size forbids it [MQTT-3.1.2-24]
        self.output_ready()

    def _send_puback(self, packet_id: int) -> None:
        """``_send(Puback(packet_id))`` through the machine's shortcut (4 bytes: never
        above the client's Maximum Packet Size)."""
        if self._closing or self.proto.closed:
            return
        self._out.append(self.proto.send_puback(packet_id))
        self.output_ready()

    def wake(self) -> None:
        self.output_ready()

    def output_ready(self) -> None:
        """There is something to send. Inside a reader's chunk it waits for the chunk's
        end (``Broker.flush_batch``: one write per connection, no task switch);
        otherwise the writer task is woken."""
        batch = self.broker.batch
        if batch is None:
            self._kick()
        elif not self._in_batch:
            self._in_batch = True
            batch.append(self)

    def _kick(self) -> None:
        """Wake the writer, starting it on first need. Before CONNACK and once closing
        there is none to start: ``run`` sends what is left itself."""
        if self._writer_scope is None:
            if self._closing or self.session is None:
                return
            self._writer_scope = trio.CancelScope()
            self.broker.spawn(self._writer)
        self._wake.set()

    def flush_direct(self) -> None:
        """Send what is pending from the calling task when nothing is ahead of it (no
        writer, or an idle one), moving queued copies into the window first; what the
        kernel does not take, or a copy that needs a commit first, goes to the writer."""
        self._in_batch = False
        raw = self._raw
        if raw is None or self._closing or (self._writer_scope is not None and not self._idle):
            self._kick()
            return
        more = False
        session = self.session
        if session is not None and (session.queue or session.backlog):
            self._out.extend(self._take(None))
            more = bool(session.queue) and self.proto.can_send_qos_message()
        if not self._out:
            if more:
                self._kick()
            return
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        self._out = []
        self._qos0_pending = 0
        try:
            sent = raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close_soon()
            return
        if sent < len(data):
            self._out.append(data[sent:])
            self._kick()
        elif more:
            self._kick()

    def send_qos0(
        self, msg: AppMessage, retain: bool, sub_ids: tuple[int, ...], now: float
    ) -> None:
        """A QoS 0 copy: bytes built once per shape and shared by recipients."""
        if self._closing:
            return
        if self._qos0_pending >= self.broker.config.sessions.max_outbound_queue:
            return  # slow consumer: QoS 0 is dropped rather than buffered without bound
        enc = msg.encoded_for(self.version, now)
        if enc is None:
            return  # expired [MQTT-3.3.2-5]
        try:
            data = self.proto.send_publish(
                enc, qos=0, retain=retain, subscription_identifiers=sub_ids
            )
        except PacketTooLargeError:
            return
        self._out.append(data)
        self._qos0_pending += 1
        self.output_ready()

    def _take(self, staged: list[tuple[Outgoing, int, int]] | None) -> list[bytes]:
        """Move queued copies into the client's Receive Maximum window, in order, and
        return their bytes: at most ``FILL_BATCH`` packets, so a busy session still sends
        while new copies keep arriving.

        A QoS 2 copy of a persistent session has its packet id recorded in a commit
        before its bytes may go out: it is listed in ``staged`` for the caller to commit,
        or, with ``staged`` None (a direct flush, which cannot wait), left queued.
        """
        session = self.session
        assert session is not None
        proto = self.proto
        persist = self.broker.persist
        queue = session.queue
        now = trio.current_time()
        ready: list[bytes] = []
        while queue and len(ready) < FILL_BATCH:
            og = queue[0]
            if og.qos and not proto.can_send_qos_message():
                break
            if staged is None and og.qos == 2 and og.pend_seq:
                break
            queue.popleft()
            session.queued_bytes -= len(og.message.payload)
            enc = og.message.encoded_for(self.version, now)
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
        if session.retained_backlog is not None:
            self.broker.refill_retained(session)
        if session.backlog:  # copies waiting on disk: the next page is read in time
            self.broker.queues.page_soon(session)
        return ready

    async def _fill(self) -> None:
        """The writer's move of queued copies (:meth:`_take`), committing staged ones."""
        session = self.session
        if session is None:
            return
        staged: list[tuple[Outgoing, int, int]] = []
        ready = self._take(staged)
        if staged:
            persist = self.broker.persist
            fut = persist.stage_copies(session, staged)
            assert fut is not None
            persist.stages_committed(staged, await wait_future(fut))
        self._out.extend(ready)
        if session.queue and self.proto.can_send_qos_message():
            self._wake.set()  # more to send after this flush

    async def _writer(self) -> None:
        """Started by :meth:`_kick` in the broker's nursery; ended by ``run`` (closing
        flushes first) or by a failed send, which closes the connection."""
        scope = self._writer_scope
        assert scope is not None
        try:
            with scope:
                while True:
                    self._idle = not self._out
                    await self._wake.wait()  # a checkpoint even when already set
                    self._idle = False
                    self._wake = trio.Event()
                    if not self._closing:
                        try:
                            await self._fill()
                        except StorageError:
                            self._storage_failed()
                    if self._out:
                        out = self._out
                        self._out = []
                        self._qos0_pending = 0
                        data = out[0] if len(out) == 1 else b"".join(out)
                        try:
                            # The kernel first; only what it does not take waits (trio's
                            # send_all, two scheduler checkpoints per call, dominated
                            # fan-out to many connections).
                            await self._send_all(data)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            self._closing = True
                            self._stop_reading()
                            return
                    if self._closing and not self._out:
                        return
        finally:
            self._writer_done.set()

    def _storage_failed(self) -> None:
        """A commit this connection waited for failed (logged by ``broker.persist``): close
        it (0x80); the client's unacknowledged packets are sent again after it reconnects."""
        self._disconnect(ReasonCode.UNSPECIFIED_ERROR, NOT_STORED)

    # == the ordered pipeline ===================================================================

    async def _step(
        self,
        wait: Callable[[], Awaitable[Any]] | None,
        then: Callable[[], None],
        failed: Callable[[], None] | None = None,
    ) -> None:
        """Run ``then`` once ``wait`` (a commit) is done, in the order of the steps; if the
        commit failed, ``failed`` instead (None: the connection is closed, 0x80)."""
        if wait is None and self._steps_pending == 0:
            then()
            return
        # About to wait (maybe): what this chunk produced so far goes out now, so no
        # other task's output is held while this one is suspended.
        self.broker.flush_batch()
        if self._steps_send is None:
            if self._closing:
                return
            send, recv = trio.open_memory_channel[Step](
                self.broker.config.mqtt.receive_maximum + 256
            )
            self._steps_send = send
            self.broker.spawn(self._pipeline, recv)
        self._steps_pending += 1
        try:
            # No checkpoint per packet: the rest of the chunk joins the same store batch.
            try:
                self._steps_send.send_nowait((wait, then, failed))
            except trio.WouldBlock:
                await self._steps_send.send((wait, then, failed))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._steps_pending -= 1

    async def _pipeline(self, steps: trio.MemoryReceiveChannel[Step]) -> None:
        """Owned by the broker's nursery: a commit already submitted is applied even if
        this connection dies meanwhile (its acknowledgements are then not sent)."""
        async with steps:
            async for step in steps:
                # Steps whose commit is already done run without a checkpoint each: a
                # scheduler pass per acknowledgement made this the bottleneck.
                while True:
                    wait, then, failed = step
                    if wait is not None:
                        try:
                            await wait()
                        except StorageError:
                            then = failed or self._storage_failed
                    then()
                    self._steps_pending -= 1
                    try:
                        step = steps.receive_nowait()
                    except trio.WouldBlock:
                        break
                    except trio.EndOfChannel:
                        return  # the connection is gone and every step has run

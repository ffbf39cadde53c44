"""The JetStream context end to end against the broker's `$JS/API` (issue 21), under
asyncio and trio."""

from __future__ import annotations

import anyio
import pytest

from client import Client, JetStreamError, NoStreamResponseError, StreamNotFoundError
from client.errors import (
    ConsumerNotFoundError,
    NoMessageFoundError,
    SequenceGapError,
    StreamNameAlreadyInUseError,
)
from client.push import PushSubscription
from store.models import ConsumerConfig, StreamConfig
from tests.client.conftest import needs_jetstream

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), needs_jetstream]


async def test_stream_lifecycle_and_typed_errors(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            info = await js.add_stream(name="ORDERS", subjects=["orders.>"])
            assert info.config.name == "ORDERS"
            assert info.config.subjects == ["orders.>"]
            assert info.state.messages == 0
            again = await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"]))
            assert again.config == info.config
            with pytest.raises(StreamNameAlreadyInUseError) as exc:
                await js.add_stream(name="ORDERS", subjects=["other.>"])
            assert exc.value.err_code == 10058
            await js.add_stream(name="B", subjects=["b.*"], storage="memory")
            assert await js.stream_names() == ["B", "ORDERS"]
            assert await js.stream_names("orders.x") == ["ORDERS"]
            assert sorted(i.config.name for i in await js.streams_info()) == ["B", "ORDERS"]
            updated = await js.update_stream(
                info.config.model_copy(update={"max_msgs": 10, "description": "d"})
            )
            assert updated.config.max_msgs == 10
            with pytest.raises(StreamNotFoundError) as missing:
                await js.stream_info("NOPE")
            assert (missing.value.code, missing.value.err_code) == (404, 10059)
            assert missing.value.description == "stream not found"
            assert await js.delete_stream("B")
            assert await js.stream_names() == ["ORDERS"]


async def test_publish_returns_puback_from_puback_properties_and_json(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            first = await js.publish("s/1", b"one", msg_id="id-1")
            assert (first.stream, first.seq, first.duplicate) == ("S", 1, False)
            dup = await js.publish("s/1", b"one", msg_id="id-1")
            assert (dup.stream, dup.seq, dup.duplicate) == ("S", 1, True)
            second = await js.publish("s/2", b"two", json_ack=True)
            assert (second.stream, second.seq) == ("S", 2)
            qos2 = await js.publish("s/3", b"three", qos=2)
            assert qos2.seq == 3
            with pytest.raises(JetStreamError) as wrong:
                await js.publish("s/4", b"x", stream="OTHER")
            assert wrong.value.err_code == 10060
            assert wrong.value.description == "expected stream does not match"
            with pytest.raises(JetStreamError) as wrong_json:
                await js.publish(
                    "s/4", b"x", headers={"Nats-Expected-Last-Sequence": "99"}, json_ack=True
                )
            assert (wrong_json.value.code, wrong_json.value.err_code) == (400, 10071)
            assert wrong_json.value.description == "wrong last sequence: 3"
            with pytest.raises(NoStreamResponseError):
                await js.publish("not/captured", b"x")
            assert (await js.stream_info("S")).state.messages == 3


async def test_get_delete_and_purge_messages(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="M", subjects=["m.>"])
            for i in range(5):
                await js.publish(f"m/{i % 2}", f"p{i}", headers=[("h", str(i))])
            msg = await js.get_msg("M", 2)
            assert (msg.subject, msg.seq, msg.data) == ("m.1", 2, b"p1")
            assert msg.header("h") == "1"
            last = await js.get_msg("M", subject="m.0")
            assert last.seq == 5
            assert await js.delete_msg("M", 5)
            with pytest.raises(NoMessageFoundError):
                await js.get_msg("M", 5)
            with pytest.raises(JetStreamError) as gone:
                await js.delete_msg("M", 5)
            assert gone.value.err_code == 10043
            assert await js.purge_stream("M", subject="m.1") == 2
            assert await js.purge_stream("M") == 2
            assert (await js.stream_info("M")).state.messages == 0


async def test_pull_fetch_with_acks_nak_and_term(server: str) -> None:
    with anyio.fail_after(45):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="P", subjects=["p.>"])
            for i in range(5):
                await js.publish(f"p/{i}", f"m{i}")
            psub = await js.pull_subscribe("p.>", durable="worker")
            got = await psub.fetch(3, timeout=5)
            assert [m.data for m in got] == [b"m0", b"m1", b"m2"]
            assert [m.subject for m in got] == ["p.0", "p.1", "p.2"]
            assert [m.topic for m in got] == ["p/0", "p/1", "p/2"]
            md = got[0].metadata
            assert md is not None
            assert (md.stream, md.consumer, md.sequence.stream, md.num_delivered) == (
                "P",
                "worker",
                1,
                1,
            )
            for m in got:
                await m.ack_sync()
            rest = await psub.fetch(10, timeout=1)
            assert [m.data for m in rest] == [b"m3", b"m4"]
            await rest[0].nak()
            await rest[1].term()
            again = await psub.fetch(1, timeout=5)
            assert again[0].data == b"m3"
            assert again[0].metadata is not None
            assert again[0].metadata.num_delivered == 2
            await again[0].ack_sync()
            with pytest.raises(TimeoutError):
                await psub.fetch(1, timeout=0.5)
            assert await psub.fetch(5, timeout=None) == []
            info = await psub.consumer_info()
            assert info.num_ack_pending == 0
            assert info.num_pending == 0
            assert info.ack_floor.stream_seq == 5
            assert await js.consumer_names("P") == ["worker"]
            assert [i.name for i in await js.consumers_info("P")] == ["worker"]
            assert await js.delete_consumer("P", "worker")
            with pytest.raises(ConsumerNotFoundError):
                await js.consumer_info("P", "worker")


async def test_ephemeral_pull_consumer_is_deleted_with_its_subscription(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="E", subjects=["e.>"])
            await js.publish("e/1", b"x")
            psub = await js.pull_subscribe("e.>")
            (msg,) = await psub.fetch(1, timeout=5)
            await msg.ack()
            assert len(await js.consumer_names("E")) == 1
            await psub.unsubscribe()
            assert await js.consumer_names("E") == []


async def test_push_subscription_delivers_in_order_with_acks(server: str) -> None:
    with anyio.fail_after(45):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="PU", subjects=["pu.>"])
            sub = await js.subscribe("pu.>")
            for i in range(50):
                await js.publish(f"pu/{i}", b"x" * 1000)
            seqs = []
            for _ in range(50):
                msg = await sub.next_msg(5)
                assert msg.metadata is not None
                seqs.append(msg.metadata.sequence.stream)
                await msg.ack()
            assert seqs == list(range(1, 51))
            assert sub.delivered == (50, 50)
            with pytest.raises(TimeoutError):
                await sub.next_msg(0.5)
            await js.publish("pu/late", b"late")
            assert (await sub.next_msg(5)).data == b"late"
            info = await sub.consumer_info()
            assert info.push_bound
            await sub.unsubscribe()
            assert await js.consumer_names("PU") == []


async def test_push_heartbeats_and_flow_control_keep_the_subscription_alive(server: str) -> None:
    with anyio.fail_after(45):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="HB", subjects=["hb.>"])
            sub = await js.subscribe("hb.>", idle_heartbeat=0.2, flow_control=True)
            for i in range(200):
                await js.publish(f"hb/{i}", b"x" * 10_000)
            for _ in range(200):
                await (await sub.next_msg(5)).ack()
            assert sub.flow_controls > 0  # 2 MB through: the window was asked to grow
            # Idle: heartbeats keep it alive (no ConsumerStalledError), then a timeout.
            with pytest.raises(TimeoutError):
                await sub.next_msg(1.0)
            assert sub.heartbeats >= 2
            await sub.unsubscribe()


async def test_durable_push_binding_rules(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="D", subjects=["d.>"])
            await js.add_consumer("D", ConsumerConfig(durable_name="pull", ack_policy="explicit"))
            with pytest.raises(JetStreamError, match="pull based"):
                await js.subscribe("d.>", durable="pull")
            sub = await js.subscribe("d.>", durable="push1")
            await js.publish("d/1", b"1")
            assert (await sub.next_msg(5)).data == b"1"
            with pytest.raises(JetStreamError, match="already bound"):
                await js.subscribe("d.>", durable="push1")
            await sub.unsubscribe()
            assert "push1" in await js.consumer_names("D")  # a durable outlives its subscription


async def test_ordered_consumer_recreates_itself(server: str) -> None:
    with anyio.fail_after(45):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="O", subjects=["o.>"])
            for i in range(3):
                await js.publish(f"o/{i}", str(i))
            sub = await js.subscribe("o.>", ordered_consumer=True, idle_heartbeat=0.3)
            assert [(await sub.next_msg(5)).data for _ in range(3)] == [b"0", b"1", b"2"]
            first = sub.consumer
            # The consumer vanishes: heartbeats stop; the subscription must re-create it
            # from stream sequence 4 and go on.
            await js.delete_consumer("O", first)
            for i in range(3, 5):
                await js.publish(f"o/{i}", str(i))
            assert [(await sub.next_msg(10)).data for _ in range(2)] == [b"3", b"4"]
            assert sub.resets >= 1
            assert sub.consumer != first
            await sub.unsubscribe()


async def test_push_deliver_group_shares_messages_between_members(server: str) -> None:
    with anyio.fail_after(45):
        async with Client(server) as a, Client(server) as b:
            js_a, js_b = a.jetstream(), b.jetstream()
            await js_a.add_stream(name="G", subjects=["g.>"])
            m1 = await js_a.subscribe("g.>", queue="workers")
            m2 = await js_b.subscribe("g.>", queue="workers")
            assert m1.consumer == m2.consumer == "workers"
            for i in range(20):
                await js_a.publish(f"g/{i}", str(i))
            got: list[int] = []

            async def drain(sub: PushSubscription) -> None:
                while True:
                    try:
                        msg = await sub.next_msg(1.0)
                    except TimeoutError:
                        return
                    got.append(int(msg.data))
                    await msg.ack()

            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, m1)
                tg.start_soon(drain, m2)
            assert sorted(got) == list(range(20))
            with pytest.raises(JetStreamError, match="deliver group"):
                await js_a.subscribe("g.>", durable="workers")


async def test_push_gap_is_detected_when_the_client_drops(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="GAP", subjects=["gap.>"])
            seen: list[Exception] = []

            async def on_error(exc: Exception) -> None:
                seen.append(exc)

            sub = await js.subscribe(
                "gap.>", pending_msgs_limit=5, error_cb=on_error, deliver_policy="new"
            )
            for i in range(40):
                await js.publish(f"gap/{i}", str(i))
            # The broker has sent all 40 (each check a round trip behind its deliveries).
            while (await sub.consumer_info()).delivered.consumer_seq < 40:
                pass
            first = [int((await sub.next_msg(5)).data) for _ in range(5)]
            assert first == [0, 1, 2, 3, 4]
            await js.publish("gap/late", b"late")
            assert (await sub.next_msg(5)).data == b"late"
            assert isinstance(seen[0], SequenceGapError)
            assert (seen[0].expected, seen[0].got) == (6, 41)


@pytest.mark.slow
async def test_ordered_consumer_recovers_from_its_own_drops_in_order(server: str) -> None:
    with anyio.fail_after(45):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="ORD", subjects=["ord.>"])
            for i in range(100):
                await js.publish(f"ord/{i}", str(i))
            sub = await js.subscribe(
                "ord.>", ordered_consumer=True, idle_heartbeat=0.3, pending_msgs_limit=10
            )
            got = [int((await sub.next_msg(10)).data) for _ in range(100)]
            assert got == list(range(100))
            assert sub.resets >= 1  # 100 messages into a 10-message buffer: it had to


async def test_nak_with_delay_and_in_progress(server: str) -> None:
    with anyio.fail_after(30):
        async with Client(server) as c:
            js = c.jetstream()
            await js.add_stream(name="NK", subjects=["nk"])
            await js.publish("nk", b"x")
            cfg = ConsumerConfig(durable_name="w", ack_policy="explicit", ack_wait=1_000_000_000)
            await js.add_consumer("NK", cfg)
            psub = await js.pull_subscribe(stream="NK", durable="w")
            (msg,) = await psub.fetch(1, timeout=5)
            t0 = anyio.current_time()
            await msg.nak(delay=0.6)
            await msg.ack()  # ignored: the NAK was terminal
            (again,) = await psub.fetch(1, timeout=5)
            assert anyio.current_time() - t0 >= 0.5
            assert again.metadata is not None
            assert again.metadata.num_delivered == 2
            # +WPI keeps it from being redelivered past ack_wait (1 s) while "working".
            for _ in range(3):
                await again.in_progress()
                with pytest.raises(TimeoutError):
                    await psub.fetch(1, timeout=0.5)
            await again.ack_sync()
            assert (await psub.consumer_info()).num_ack_pending == 0

#!/usr/bin/env python3
"""Benchmark the sans-I/O MQTT codec against amqtt's packet decoding.

Decodes 100-byte-payload QoS 0 and QoS 1 PUBLISH packets (MQTT 5.0 and 3.1.1) fed in
64 KiB chunks, encodes them (``encode``) and builds them for fan-out
(``EncodedPublish.for_recipient``, and the one-step common copy ``copy``/``qos0``
that ``send_publish`` takes), and decodes the same 3.1.1 bytes with amqtt's
``MQTTFixedHeader.from_stream`` + ``PublishPacket.from_stream`` over an in-memory
``asyncio.StreamReader`` fed the same 64 KiB chunks (amqtt speaks 3.1.1 only). Reports
packets/s, median of 5; the amqtt ratio is the median of 5 back-to-back rounds.

Run: ``.venv/bin/python scripts/bench_codec.py [--packets N]``; it runs the codec compiled
when the build is current (``hotpath/``), interpreted with ``JETMQ_NATIVE=0``, and says which.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hotpath
from broker.mqtt.codec import Decoder, EncodedPublish, encode
from broker.mqtt.connection import Connection
from broker.mqtt.packets import Connack, Connect, ProtocolVersion, Publish

CHUNK = 64 * 1024
PAYLOAD = bytes(range(100))
TOPIC = b"sensors/building-1/floor-2/temperature"
ROUNDS = 5


def _median_rate(count: int, run: Callable[[], None]) -> float:
    rates = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        run()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def _stream(version: ProtocolVersion, qos: int, count: int) -> tuple[Publish, bytes]:
    packet = Publish(TOPIC, PAYLOAD, qos=qos, packet_id=1 if qos else None)
    one = encode(packet, version)
    return packet, one * count


def bench_decode(version: ProtocolVersion, qos: int, count: int) -> float:
    return _median_rate(count, _decode_runner(version, qos, count))


def bench_connection(version: ProtocolVersion, qos: int, count: int) -> float:
    """Decoder plus the server connection machine (what the broker calls per chunk)."""
    _, data = _stream(version, qos, count)
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]

    def run() -> None:
        conn = Connection()
        conn.receive_data(encode(Connect(version, "bench"), version))
        conn.send(Connack())
        total = 0
        for chunk in chunks:
            total += len(conn.receive_data(chunk))
        assert total == count, total

    return _median_rate(count, run)


def bench_encode(version: ProtocolVersion, qos: int, count: int) -> float:
    packet, _ = _stream(version, qos, count)

    def run() -> None:
        for _ in range(count):
            encode(packet, version)

    return _median_rate(count, run)


def bench_fanout(version: ProtocolVersion, qos: int, count: int) -> float:
    packet, _ = _stream(version, qos, count)
    encoded = EncodedPublish(packet, version)

    def run() -> None:
        for i in range(count):
            encoded.for_recipient(packet_id=(i % 65535) + 1 if qos else None, qos=qos)

    return _median_rate(count, run)


def bench_copy(version: ProtocolVersion, qos: int, count: int) -> float:
    """The same fan-out through the one-step common copy ``send_publish`` takes
    (``EncodedPublish.copy`` for QoS 1, ``qos0`` for QoS 0)."""
    packet, _ = _stream(version, qos, count)
    encoded = EncodedPublish(packet, version)

    def run() -> None:
        if qos:
            for i in range(count):
                encoded.copy(qos, False, (i % 65535) + 1)
        else:
            for _ in range(count):
                encoded.qos0(False)

    return _median_rate(count, run)


def _amqtt_runner(qos: int, count: int) -> Callable[[], None]:
    from amqtt.adapters import StreamReaderAdapter
    from amqtt.mqtt.packet import MQTTFixedHeader
    from amqtt.mqtt.publish import PublishPacket

    _, data = _stream(ProtocolVersion.MQTT_3_1_1, qos, count)

    async def decode_all() -> None:
        reader = asyncio.StreamReader(limit=len(data) + 1)
        for i in range(0, len(data), CHUNK):
            reader.feed_data(data[i : i + CHUNK])
        reader.feed_eof()
        adapter = StreamReaderAdapter(reader)
        for _ in range(count):
            header = await MQTTFixedHeader.from_stream(adapter)
            packet = await PublishPacket.from_stream(adapter, fixed_header=header)
            assert packet.data == PAYLOAD

    def run() -> None:
        asyncio.run(decode_all())

    return run


def _decode_runner(version: ProtocolVersion, qos: int, count: int) -> Callable[[], None]:
    _, data = _stream(version, qos, count)
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]

    def run() -> None:
        decoder = Decoder(version)
        total = 0
        for chunk in chunks:
            total += len(decoder.feed(chunk))
        assert total == count, total

    return run


def _rate(count: int, run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return count / (time.perf_counter() - start)


def compare_with_amqtt(qos: int, count: int, amqtt_count: int) -> tuple[float, float, float]:
    """(ours/s, amqtt/s, ratio): medians over rounds that run both back to back, so a
    change of load on the shared machine hits both sides of each ratio alike."""
    ours_run = _decode_runner(ProtocolVersion.MQTT_3_1_1, qos, count)
    theirs_run = _amqtt_runner(qos, amqtt_count)
    ours: list[float] = []
    theirs: list[float] = []
    ratios: list[float] = []
    for _ in range(ROUNDS):
        o = _rate(count, ours_run)
        t = _rate(amqtt_count, theirs_run)
        ours.append(o)
        theirs.append(t)
        ratios.append(o / t)
    return statistics.median(ours), statistics.median(theirs), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packets", type=int, default=200_000)
    args = parser.parse_args()
    count: int = args.packets
    print(f"python {sys.version.split()[0]}, {count} packets per round, median of {ROUNDS}")
    print(f"hot path: {hotpath.state()} (JETMQ_NATIVE=0: interpreted)")
    print(f"PUBLISH, topic {len(TOPIC)} B, payload {len(PAYLOAD)} B, decode chunks {CHUNK} B")
    for version in (ProtocolVersion.MQTT_5, ProtocolVersion.MQTT_3_1_1):
        for qos in (0, 1):
            dec = bench_decode(version, qos, count)
            enc = bench_encode(version, qos, count)
            fan = bench_fanout(version, qos, count)
            copy = bench_copy(version, qos, count)
            conn = bench_connection(version, qos, count)
            print(
                f"{version.name:10} QoS {qos}: decode {dec:>10,.0f}/s  encode {enc:>10,.0f}/s"
                f"  fan-out {fan:>10,.0f}/s  common copy {copy:>10,.0f}/s"
                f"  connection receive {conn:>10,.0f}/s"
            )
    amqtt_count = max(count // 10, 1000)
    for qos in (0, 1):
        ours, theirs, ratio = compare_with_amqtt(qos, count, amqtt_count)
        print(
            f"3.1.1 QoS {qos} decode, interleaved rounds: jetmq {ours:>10,.0f}/s"
            f"  amqtt {theirs:>8,.0f}/s  ratio {ratio:.1f}x"
        )


if __name__ == "__main__":
    main()

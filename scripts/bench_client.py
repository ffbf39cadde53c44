"""The Python client's own rates against a ``jetmq serve`` child on 127.0.0.1 (bounded).

    .venv/bin/python scripts/bench_client.py [--messages N] [--backend asyncio|trio]

Measures, with ``client.Client`` on one event loop: QoS 0 publish and QoS 1 publish
(sequential round trips, and 16 concurrent publishers), JetStream publish with PubAck
(16 concurrent), pull-consume with explicit acks in batches of 100, and request/response
round trips. Prints one JSON object. Numbers depend on the machine and its load: compare
runs made back to back, not across machines.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from client import Client


def _start_broker(data_dir: str) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, "-m", "broker", "serve", "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [*cmd, "--data-dir", data_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on" in line:
            return proc, int(line.rsplit(":", 1)[1])
    raise RuntimeError("broker did not start")


async def _concurrent(n: int, workers: int, one: object) -> float:
    assert callable(one)
    per = n // workers

    async def worker(w: int) -> None:
        for i in range(per):
            await one(w * per + i)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for w in range(workers):
            tg.start_soon(worker, w)
    return per * workers / (time.perf_counter() - t0)


async def run(server: str, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    payload = b"x" * 128
    async with Client(server) as c, Client(server) as sink:
        await sink.subscribe("bench/#", qos=1, max_pending=0)
        t0 = time.perf_counter()
        for _ in range(n):
            await c.publish("bench/q0", payload, 0)
        out["qos0_publish_per_s"] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n // 4):
            await c.publish("bench/q1", payload, 1)
        out["qos1_publish_sequential_per_s"] = (n // 4) / (time.perf_counter() - t0)

        async def q1(_i: int) -> None:
            await c.publish("bench/q1c", payload, 1)

        out["qos1_publish_16_concurrent_per_s"] = await _concurrent(n, 16, q1)

        js = c.jetstream()
        await js.add_stream(name="BENCH", subjects=["js.>"])

        async def jpub(i: int) -> None:
            await js.publish(f"js/{i % 16}", payload)

        out["js_publish_puback_16_concurrent_per_s"] = await _concurrent(n, 16, jpub)

        stored = (await js.stream_info("BENCH")).state.messages
        psub = await js.pull_subscribe("js.>", durable="bench")
        got = 0
        t0 = time.perf_counter()
        while got < stored:
            msgs = await psub.fetch(100, timeout=5)
            for m in msgs:
                await m.ack()
            got += len(msgs)
        out["js_pull_ack_batch100_per_s"] = got / (time.perf_counter() - t0)

        async with await sink.subscribe("svc/echo", qos=0) as svc, anyio.create_task_group() as tg:

            async def echo() -> None:
                async for req in svc:
                    await sink.respond(req, req.payload)

            tg.start_soon(echo)
            lat = []
            for _ in range(min(n // 10, 500)):
                t = time.perf_counter()
                await c.request("svc/echo", payload, 5, qos=0)
                lat.append((time.perf_counter() - t) * 1000)
            tg.cancel_scope.cancel()
        lat.sort()
        out["request_p50_ms"] = statistics.median(lat)
        out["request_p99_ms"] = lat[int(len(lat) * 0.99) - 1]
    return {k: round(v, 3 if k.endswith("_ms") else 0) for k, v in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        proc, port = _start_broker(data)
        try:
            result = anyio.run(run, f"mqtt://127.0.0.1:{port}", args.messages, backend=args.backend)
        finally:
            proc.terminate()
            proc.wait(30)
    print(json.dumps({"backend": args.backend, "messages": args.messages, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``jetmq stream|consumer|pub|sub|req``: the client verbs of the ``jetmq`` command.

``broker.cli`` hands these verbs here (``main(argv)``). Each runs one async function on
an asyncio loop against ``--server`` (default ``mqtt://127.0.0.1:1883``). Output is the
``nats`` CLI's (tables, ``Label: value`` blocks); ``--json`` prints the API's JSON for
scripts. Any failure - broker down, a refusal, a JetStream error, a timeout, a bad
flag value - is one line ``jetmq: ...`` on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence

import anyio

from client import cli_consumer, cli_js
from client.cli_js import connect
from client.errors import ClientError, JetStreamError
from client.message import Message
from client.url import DEFAULT_SERVER, parse_server
from client.verbs import HELP


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server", "-s", default=DEFAULT_SERVER, help=f"broker address (default {DEFAULT_SERVER})"
    )
    parser.add_argument("--json", "-j", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for answers (default 5)"
    )
    parser.add_argument("--user", default=None, help="user name")
    parser.add_argument("--password", default=None, help="password")
    tls = parser.add_argument_group("TLS (with an mqtts:// --server)")
    tls.add_argument("--tls-ca", metavar="FILE", help="CA certificates (default: the system's)")
    tls.add_argument("--tls-cert", metavar="FILE", help="client certificate (PEM)")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key, if not in --tls-cert")
    tls.add_argument(
        "--tls-insecure", action="store_true", help="do not check the server's certificate"
    )


def _user_props(values: list[str] | None) -> list[tuple[str, str]]:
    out = []
    for v in values or []:
        if ":" not in v:
            raise ValueError(f"--header {v!r}: expected NAME:VALUE")
        k, _, val = v.partition(":")
        out.append((k.strip(), val.strip()))
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jetmq")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    cli_js.add_stream_parser(verbs.add_parser("stream", help=HELP["stream"]), _common)
    cli_consumer.add_consumer_parser(verbs.add_parser("consumer", help=HELP["consumer"]), _common)

    p = verbs.add_parser("pub", help=HELP["pub"])
    _common(p)
    p.add_argument("topic")
    p.add_argument("body", nargs="?", default="")
    p.add_argument("--qos", "-q", type=int, choices=(0, 1, 2), default=1)
    p.add_argument("--retain", action="store_true")
    p.add_argument("--count", type=int, default=1, help="publish the message N times")
    p.add_argument("--header", "-H", action="append", help="user property NAME:VALUE")
    p.set_defaults(run=_pub)

    p = verbs.add_parser("sub", help=HELP["sub"])
    _common(p)
    p.add_argument("filters", nargs="+", metavar="FILTER")
    p.add_argument("--qos", "-q", type=int, choices=(0, 1, 2), default=1)
    p.add_argument("--count", type=int, default=0, help="stop after N messages")
    p.add_argument("--wait", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(run=_sub)

    p = verbs.add_parser("req", help=HELP["req"])
    _common(p)
    p.add_argument("topic")
    p.add_argument("body", nargs="?", default="")
    p.add_argument("--header", "-H", action="append", help="user property NAME:VALUE")
    p.set_defaults(run=_req)
    return parser


def message_json(msg: Message) -> dict[str, object]:
    out: dict[str, object] = {"topic": msg.topic, "qos": msg.qos, "retain": msg.retain}
    try:
        out["data"] = msg.payload.decode()
    except UnicodeDecodeError:
        out["data_hex"] = msg.payload.hex()
    if msg.user_properties:
        out["headers"] = [list(p) for p in msg.user_properties]
    if msg.response_topic:
        out["response_topic"] = msg.response_topic
    return out


def print_message(msg: Message, n: int | None = None) -> None:
    where = f"[#{n}] " if n is not None else ""
    print(f"{where}Received on {msg.topic!r} qos {msg.qos}{' retained' if msg.retain else ''}")
    for k, v in msg.user_properties:
        print(f"{k}: {v}")
    if msg.user_properties:
        print()
    print(msg.payload.decode(errors="replace"))
    print()


async def _pub(args: argparse.Namespace) -> int:
    props = _user_props(args.header)
    async with connect(args) as c:
        for i in range(args.count):
            body = args.body.replace("{{Count}}", str(i + 1))
            result = await c.publish(args.topic, body, args.qos, args.retain, user_properties=props)
            stream, seq = result.header("Nats-Stream"), result.header("Nats-Sequence")
            if args.json:
                out: dict[str, object] = {
                    "topic": args.topic,
                    "reason_code": int(result.reason_code),
                }
                if stream:
                    out |= {"stream": stream, "seq": int(seq or 0)}
                print(json.dumps(out))
            else:
                extra = f" (stream {stream} seq {seq})" if stream else ""
                print(f"Published {len(body.encode())} bytes to {args.topic!r}{extra}")
    return 0


async def _sub(args: argparse.Namespace) -> int:
    async with connect(args) as c:
        sub = await c.subscribe(*args.filters, qos=args.qos)
        if not args.json:
            print(f"Subscribing on {', '.join(args.filters)}", flush=True)
        n = 0
        with anyio.move_on_after(args.wait):
            async for msg in sub:
                n += 1
                if args.json:
                    print(json.dumps(message_json(msg)), flush=True)
                else:
                    print_message(msg, n)
                    sys.stdout.flush()
                if args.count and n >= args.count:
                    break
    return 0


async def _req(args: argparse.Namespace) -> int:
    props = _user_props(args.header)
    async with connect(args) as c:
        answer = await c.request(args.topic, args.body, args.timeout, user_properties=props)
    if args.json:
        print(json.dumps(message_json(answer)))
    else:
        print_message(answer)
    return 0


def _fail(text: str) -> int:
    print(f"jetmq: {text}", file=sys.stderr)
    return 1


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    run: Callable[[argparse.Namespace], Awaitable[int]] = args.run
    try:
        parse_server(args.server)
        return anyio.run(run, args)
    except JetStreamError as exc:
        return _fail(f"{exc.description} ({exc.code}/{exc.err_code})")
    except (ClientError, TimeoutError, ValueError, OSError) as exc:
        return _fail(str(exc) or type(exc).__name__)
    except KeyboardInterrupt:
        return 130

"""``jetmq consumer ls|add|info|edit|rm|next`` (see ``client.cli_js`` for the shared parts)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from client.cli_format import (
    fields,
    human_count,
    human_duration,
    parse_count,
    parse_duration,
    table,
)
from client.cli_js import Common, _connect, _dump, _flag_values, _js, _read_config
from client.jsmsg import JsMsg
from store.models import ConsumerConfig, ConsumerInfo, format_time

_CONSUMER_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "ack": ("ack_policy", str),
    "replay": ("replay_policy", str),
    "max_deliver": ("max_deliver", parse_count),
    "wait": ("ack_wait", parse_duration),
    "max_pending": ("max_ack_pending", parse_count),
    "heartbeat": ("idle_heartbeat", parse_duration),
    "target": ("deliver_subject", str),
    "deliver_group": ("deliver_group", str),
    "inactive_threshold": ("inactive_threshold", parse_duration),
    "description": ("description", str),
    "max_waiting": ("max_waiting", int),
}


def _consumer_updates(args: argparse.Namespace) -> dict[str, Any]:
    out = _flag_values(args, _CONSUMER_FLAGS)
    if args.filter:
        filters = [s for v in args.filter for s in v.split(",") if s]
        if len(filters) == 1:
            out["filter_subject"] = filters[0]
        else:
            out["filter_subjects"] = filters
    if args.flow_control:
        out["flow_control"] = True
    if args.deliver:
        out |= _deliver_policy(args.deliver)
    return out


def _deliver_policy(text: str) -> dict[str, Any]:
    """``all``, ``last``, ``new``, ``last_per_subject``/``subject``, a start sequence, or a
    duration back from now (start time)."""
    t = text.strip().lower()
    if t in ("all", "last", "new"):
        return {"deliver_policy": t}
    if t in ("last_per_subject", "subject", "last-per-subject"):
        return {"deliver_policy": "last_per_subject"}
    if t.isdigit():
        return {"deliver_policy": "by_start_sequence", "opt_start_seq": int(t)}
    ago = parse_duration(t)
    start = format_time(time.time_ns() - ago)
    return {"deliver_policy": "by_start_time", "opt_start_time": start}


def _consumer_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pull", action="store_true", help="a pull consumer (the default)")
    p.add_argument("--target", help="push: the deliver subject (NATS form, e.g. deliver.c1)")
    p.add_argument("--deliver-group", help="push: deliver group (an MQTT shared subscription)")
    p.add_argument("--deliver", help="all, last, new, subject, a start sequence, or e.g. 1h ago")
    p.add_argument("--ack", choices=("explicit", "all", "none"))
    p.add_argument("--filter", action="append", help="filter subject(s)")
    p.add_argument("--replay", choices=("instant", "original"))
    p.add_argument("--max-deliver")
    p.add_argument("--wait", help="ack wait, e.g. 30s")
    p.add_argument("--max-pending", help="max ack pending")
    p.add_argument("--max-waiting")
    p.add_argument("--heartbeat", help="push: idle heartbeat, e.g. 5s")
    p.add_argument("--flow-control", action="store_true")
    p.add_argument("--inactive-threshold")
    p.add_argument("--description")
    p.add_argument("--config", help="a JSON ConsumerConfig file (flags override it)")


def add_consumer_parser(parser: argparse.ArgumentParser, common: Common) -> None:
    verbs = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = verbs.add_parser("ls", help="list a stream's consumers")
    common(p)
    p.add_argument("stream")
    p.add_argument("--names", "-n", action="store_true")
    p.set_defaults(run=_consumer_ls)
    p = verbs.add_parser("add", help="create a consumer")
    common(p)
    p.add_argument("stream")
    p.add_argument("name", nargs="?")
    p.add_argument("--ephemeral", action="store_true", help="no name: a server-named ephemeral")
    _consumer_flags(p)
    p.set_defaults(run=_consumer_add)
    p = verbs.add_parser("edit", help="change a consumer")
    common(p)
    p.add_argument("stream")
    p.add_argument("name")
    _consumer_flags(p)
    p.set_defaults(run=_consumer_edit)
    for verb, run, text in (
        ("info", _consumer_info, "a consumer's configuration and state"),
        ("rm", _consumer_rm, "delete a consumer"),
    ):
        p = verbs.add_parser(verb, help=text)
        common(p)
        p.add_argument("stream")
        p.add_argument("name")
        p.add_argument("--force", "-f", action="store_true")
        p.set_defaults(run=run)
    p = verbs.add_parser("pause", help="pause a consumer until a time (RFC 3339)")
    common(p)
    p.add_argument("stream")
    p.add_argument("name")
    p.add_argument("--until", required=True, help="RFC 3339, e.g. 2030-01-01T00:00:00Z")
    p.set_defaults(run=_consumer_pause)
    p = verbs.add_parser("resume", help="resume a paused consumer")
    common(p)
    p.add_argument("stream")
    p.add_argument("name")
    p.set_defaults(run=_consumer_pause)
    p = verbs.add_parser("next", help="fetch (and ack) messages from a pull consumer")
    common(p)
    p.add_argument("stream")
    p.add_argument("name")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--no-ack", action="store_true", help="do not acknowledge")
    p.set_defaults(run=_consumer_next)


# ---- consumers ------------------------------------------------------------------------
async def _consumer_ls(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        js = _js(c, args)
        if args.names:
            names = await js.consumer_names(args.stream)
            _dump(names) if args.json else print("\n".join(names))
            return 0
        infos = await js.consumers_info(args.stream)
    if args.json:
        _dump([i.to_wire() for i in infos])
        return 0
    if not infos:
        print(f"No Consumers defined on {args.stream}")
        return 0
    rows = [
        (
            i.name,
            i.config.description or "",
            i.created[:19].replace("T", " "),
            i.num_ack_pending,
            i.num_pending,
            (i.delivered.last_active or "never")[:19].replace("T", " "),
        )
        for i in sorted(infos, key=lambda i: i.name)
    ]
    headers = ("Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery")
    print(table(f"Consumers on {args.stream}", headers, rows))
    return 0


def _consumer_config(args: argparse.Namespace, base: dict[str, Any]) -> ConsumerConfig:
    body = {**base, **_consumer_updates(args)}
    if getattr(args, "pull", False) and body.get("deliver_subject"):
        raise ValueError("--pull and --target exclude each other")
    return ConsumerConfig.model_validate(body)


async def _consumer_add(args: argparse.Namespace) -> int:
    base = {"ack_policy": "explicit", **_read_config(args.config)}
    config = _consumer_config(args, base)
    if args.name:
        config = config.model_copy(update={"durable_name": args.name, "name": args.name})
    elif not (args.ephemeral or config.durable_name or config.name):
        raise ValueError("a consumer name is required (or --ephemeral)")
    async with _connect(args) as c:
        info = await _js(c, args).add_consumer(args.stream, config)
    _show_consumer(info, args.json, "created")
    return 0


async def _consumer_edit(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        js = _js(c, args)
        current = (await js.consumer_info(args.stream, args.name)).config.to_wire()
        config = _consumer_config(args, {**current, **_read_config(args.config)})
        info = await js.update_consumer(args.stream, config)
    _show_consumer(info, args.json, "updated")
    return 0


async def _consumer_info(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        info = await _js(c, args).consumer_info(args.stream, args.name)
    _show_consumer(info, args.json)
    return 0


def _show_consumer(info: ConsumerInfo, as_json: bool, verb: str = "") -> None:
    if as_json:
        _dump(info.to_wire())
        return
    cfg = info.config
    head = (
        f"Consumer {info.stream_name} > {info.name} was {verb}"
        if verb
        else (f"Information for Consumer {info.stream_name} > {info.name}")
    )
    print(f"{head} (created {info.created[:19].replace('T', ' ')})\n\nConfiguration:\n")
    conf: list[tuple[str, object]] = [
        ("Name", info.name),
        ("Durable Name", cfg.durable_name or ""),
        (
            "Pull Mode" if not cfg.deliver_subject else "Delivery Subject",
            cfg.deliver_subject or True,
        ),
        ("Filter Subject", cfg.filter_subject or ", ".join(cfg.filter_subjects or []) or ""),
        ("Deliver Policy", cfg.deliver_policy),
        ("Ack Policy", cfg.ack_policy.capitalize()),
        ("Ack Wait", human_duration(cfg.ack_wait)),
        ("Replay Policy", cfg.replay_policy.capitalize()),
        ("Maximum Deliveries", human_count(cfg.max_deliver)),
        ("Max Ack Pending", cfg.max_ack_pending if cfg.max_ack_pending is not None else ""),
    ]
    if cfg.deliver_group:
        conf.append(("Deliver Group", cfg.deliver_group))
    if cfg.idle_heartbeat:
        conf.append(("Idle Heartbeat", human_duration(cfg.idle_heartbeat)))
    if cfg.flow_control:
        conf.append(("Flow Control", True))
    print(fields([(k, v) for k, v in conf if v != ""]) + "\n\nState:\n")
    print(
        fields(
            [
                (
                    "Last Delivered Message",
                    f"Consumer sequence: {info.delivered.consumer_seq} "
                    f"Stream sequence: {info.delivered.stream_seq}",
                ),
                (
                    "Acknowledgment Floor",
                    f"Consumer sequence: {info.ack_floor.consumer_seq} "
                    f"Stream sequence: {info.ack_floor.stream_seq}",
                ),
                ("Outstanding Acks", info.num_ack_pending),
                ("Redelivered Messages", info.num_redelivered),
                ("Unprocessed Messages", info.num_pending),
                ("Waiting Pulls", info.num_waiting),
            ]
        )
    )


async def _consumer_rm(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        ok = await _js(c, args).delete_consumer(args.stream, args.name)
    _dump({"success": ok}) if args.json else print(f"Deleted consumer {args.stream} > {args.name}")
    return 0


async def _consumer_pause(args: argparse.Namespace) -> int:
    """``pause --until TIME`` / ``resume``: the server's consumer_pause_response."""
    async with _connect(args) as c:
        js = _js(c, args)
        until = getattr(args, "until", None)
        if until is None:
            state = await js.resume_consumer(args.stream, args.name)
        else:
            state = await js.pause_consumer(args.stream, args.name, until)
    if args.json:
        _dump(state.to_wire())
    elif state.paused:
        print(f"Paused consumer {args.stream} > {args.name} until {state.pause_until}")
    else:
        print(f"Consumer {args.stream} > {args.name} is not paused")
    return 0


async def _consumer_next(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        js = _js(c, args)
        await js.consumer_info(args.stream, args.name)  # never created by `next`
        sub = await js.pull_subscribe(stream=args.stream, durable=args.name)
        msgs = await sub.fetch(args.count, args.timeout)
        for msg in msgs:
            if not args.no_ack:
                await msg.ack_sync(args.timeout)
            _show_js_msg(msg, args.json, acked=not args.no_ack)
    return 0


def _show_js_msg(msg: JsMsg, as_json: bool, acked: bool) -> None:
    md = msg.metadata
    if as_json:
        out: dict[str, Any] = {"subject": msg.subject, "topic": msg.topic}
        if md is not None:
            out |= {
                "stream_seq": md.sequence.stream,
                "consumer_seq": md.sequence.consumer,
                "delivered": md.num_delivered,
                "pending": md.num_pending,
            }
        out["headers"] = [list(h) for h in msg.headers if h[0] != "Nats-Subject"]
        out["data"] = msg.data.decode(errors="replace")
        out["acked"] = acked
        print(json.dumps(out))
        return
    seq = f" / {md.sequence.stream} (consumer seq {md.sequence.consumer})" if md else ""
    print(f"[{time.strftime('%H:%M:%S')}] subj: {msg.subject}{seq}\n")
    for k, v in msg.headers:
        if k != "Nats-Subject":
            print(f"{k}: {v}")
    print(msg.data.decode(errors="replace"))
    if acked:
        print("\nAcknowledged message")
    print()

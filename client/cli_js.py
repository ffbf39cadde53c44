"""``jetmq stream ...`` and ``jetmq consumer ...``, modelled on the ``nats`` CLI.

Streams and consumers are administered through the JetStream API over MQTT (the same
requests ``client.jetstream`` makes). ``--config FILE`` reads a JSON StreamConfig /
ConsumerConfig; flags given as well override its fields. ``edit`` reads the current
configuration, applies the flags given and sends an update.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from client.cli_format import (
    fields,
    human_count,
    human_duration,
    human_size,
    parse_count,
    parse_duration,
    parse_size,
    table,
)
from client.core import Client
from client.jetstream import JetStreamContext
from client.url import parse_address, tls_context
from store.models import StreamConfig, StreamInfo

Common = Callable[[argparse.ArgumentParser], None]

# flag dest -> (config key, parser)
_STREAM_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "storage": ("storage", str),
    "retention": ("retention", lambda v: "workqueue" if v in ("work", "wq") else v),
    "discard": ("discard", str),
    "max_msgs": ("max_msgs", parse_count),
    "max_bytes": ("max_bytes", parse_size),
    "max_age": ("max_age", parse_duration),
    "max_msg_size": ("max_msg_size", parse_size),
    "max_msgs_per_subject": ("max_msgs_per_subject", parse_count),
    "max_consumers": ("max_consumers", parse_count),
    "dupe_window": ("duplicate_window", parse_duration),
    "replicas": ("num_replicas", int),
    "description": ("description", str),
}


def _read_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"--config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"--config {path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a JSON object")
    return data.get("config", data) if "stream_name" in data else data


def _flag_values(
    args: argparse.Namespace, table_: dict[str, tuple[str, Callable[[str], Any]]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dest, (key, parse) in table_.items():
        value = getattr(args, dest, None)
        if value is not None:
            try:
                out[key] = parse(value)
            except ValueError as exc:
                raise ValueError(f"--{dest.replace('_', '-')}: {exc}") from None
    return out


def _stream_updates(args: argparse.Namespace) -> dict[str, Any]:
    out = _flag_values(args, _STREAM_FLAGS)
    if args.subjects:
        out["subjects"] = [s for v in args.subjects for s in v.split(",") if s]
    for flag, key in (
        ("allow_rollup", "allow_rollup_hdrs"),
        ("deny_delete", "deny_delete"),
        ("deny_purge", "deny_purge"),
        ("allow_direct", "allow_direct"),
    ):
        if getattr(args, flag):
            out[key] = True
    return out


def _stream_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--subjects", action="append", help="subjects, comma separated or repeated")
    p.add_argument("--storage", choices=("file", "memory"))
    p.add_argument("--retention", choices=("limits", "interest", "workqueue", "work"))
    p.add_argument("--discard", choices=("old", "new"))
    p.add_argument("--max-msgs", help="-1 for unlimited")
    p.add_argument("--max-bytes", help="e.g. 1GB, -1 for unlimited")
    p.add_argument("--max-age", help="e.g. 1h, 7d, 0 for unlimited")
    p.add_argument("--max-msg-size", help="e.g. 1MB")
    p.add_argument("--max-msgs-per-subject")
    p.add_argument("--max-consumers")
    p.add_argument("--dupe-window", help="duplicate window, e.g. 2m")
    p.add_argument("--replicas")
    p.add_argument("--description")
    p.add_argument("--allow-rollup", action="store_true")
    p.add_argument("--deny-delete", action="store_true")
    p.add_argument("--deny-purge", action="store_true")
    p.add_argument("--allow-direct", action="store_true")
    p.add_argument("--config", help="a JSON StreamConfig file (flags override it)")


def add_stream_parser(parser: argparse.ArgumentParser, common: Common) -> None:
    verbs = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = verbs.add_parser("ls", help="list streams")
    common(p)
    p.add_argument("--names", "-n", action="store_true", help="names only")
    p.add_argument("--subject", help="streams whose subjects match")
    p.set_defaults(run=_stream_ls)
    p = verbs.add_parser("add", help="create a stream")
    common(p)
    p.add_argument("name", nargs="?")
    _stream_flags(p)
    p.set_defaults(run=_stream_add)
    p = verbs.add_parser("edit", help="change a stream's configuration")
    common(p)
    p.add_argument("name")
    _stream_flags(p)
    p.set_defaults(run=_stream_edit)
    for verb, run, text in (
        ("info", _stream_info, "a stream's configuration and state"),
        ("rm", _stream_rm, "delete a stream"),
    ):
        p = verbs.add_parser(verb, help=text)
        common(p)
        p.add_argument("name")
        p.add_argument("--force", "-f", action="store_true", help="(no prompt is asked)")
        p.set_defaults(run=run)
    p = verbs.add_parser("purge", help="remove messages")
    common(p)
    p.add_argument("name")
    p.add_argument("--force", "-f", action="store_true")
    p.add_argument("--subject", help="only this subject (wildcards allowed)")
    p.add_argument("--seq", type=int, help="only below this sequence")
    p.add_argument("--keep", type=int, help="keep the newest N")
    p.set_defaults(run=_stream_purge)
    p = verbs.add_parser("get", help="print one stored message")
    common(p)
    p.add_argument("name")
    p.add_argument("seq", nargs="?", type=int)
    p.add_argument("--last-for", help="the last message of this subject")
    p.add_argument("--direct", action="store_true", help="use DIRECT.GET (allow_direct)")
    p.set_defaults(run=_stream_get)
    p = verbs.add_parser("rmm", help="delete one message")
    common(p)
    p.add_argument("name")
    p.add_argument("seq", type=int)
    p.add_argument("--force", "-f", action="store_true")
    p.add_argument("--erase", action="store_true", help="overwrite the bytes on disk")
    p.set_defaults(run=_stream_rmm)


def _js(c: Client, args: argparse.Namespace) -> JetStreamContext:
    return c.jetstream(timeout=args.timeout)


def connect(args: argparse.Namespace) -> Client:
    """The client for ``--server`` / ``--user`` / ``--password`` / ``--timeout`` and the
    ``--tls-*`` options (ValueError naming what is wrong with them)."""
    tls_opts = (args.tls_ca, args.tls_cert, args.tls_key)
    tls = None
    if parse_address(args.server).tls:
        tls = tls_context(*tls_opts, insecure=args.tls_insecure)
    elif any(tls_opts) or args.tls_insecure:
        raise ValueError(f"--tls-* options need an mqtts:// --server, not {args.server!r}")
    return Client(
        args.server,
        username=args.user,
        password=args.password,
        connect_timeout=args.timeout,
        keep_alive=60,
        tls=tls,
    )


_connect = connect


def _dump(data: Any) -> None:
    print(json.dumps(data, indent=2))


# ---- streams --------------------------------------------------------------------------
async def _stream_ls(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        js = _js(c, args)
        if args.names:
            names = await js.stream_names(args.subject)
            _dump(names) if args.json else print("\n".join(names))
            return 0
        infos = await js.streams_info(args.subject)
    if args.json:
        _dump([i.to_wire() for i in infos])
        return 0
    if not infos:
        print("No Streams defined")
        return 0
    rows = [
        (
            i.config.name,
            i.config.description or "",
            i.created[:19].replace("T", " "),
            human_count(i.state.messages),
            human_size(i.state.bytes),
            i.state.last_ts[:19].replace("T", " ") if i.state.last_seq else "never",
        )
        for i in sorted(infos, key=lambda i: i.config.name)
    ]
    headers = ("Name", "Description", "Created", "Messages", "Size", "Last Message")
    print(table("Streams", headers, rows))
    return 0


def _stream_config(args: argparse.Namespace, base: dict[str, Any]) -> StreamConfig:
    body = {**base, **_stream_updates(args)}
    if args.name:
        body["name"] = args.name
    if not body.get("name"):
        raise ValueError("a stream name is required (jetmq stream add NAME ...)")
    return StreamConfig.model_validate(body)


async def _stream_add(args: argparse.Namespace) -> int:
    config = _stream_config(args, _read_config(args.config))
    async with _connect(args) as c:
        info = await _js(c, args).add_stream(config)
    _show_stream(info, args.json, "created")
    return 0


async def _stream_edit(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        js = _js(c, args)
        current = (await js.stream_info(args.name)).config.to_wire()
        config = _stream_config(args, {**current, **_read_config(args.config)})
        info = await js.update_stream(config)
    _show_stream(info, args.json, "updated")
    return 0


async def _stream_info(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        info = await _js(c, args).stream_info(args.name)
    _show_stream(info, args.json)
    return 0


def _show_stream(info: StreamInfo, as_json: bool, verb: str = "") -> None:
    if as_json:
        _dump(info.to_wire())
        return
    cfg, st = info.config, info.state
    title = f"Stream {cfg.name} was {verb}" if verb else f"Information for Stream {cfg.name}"
    print(f"{title} (created {info.created[:19].replace('T', ' ')})\n")
    print("Configuration:\n")
    conf: list[tuple[str, object]] = [
        ("Subjects", ", ".join(cfg.subjects)),
        ("Retention", f"{cfg.storage.capitalize()} - {cfg.retention.capitalize()}"),
        ("Replicas", cfg.num_replicas),
        ("Discard Policy", cfg.discard.capitalize()),
        ("Duplicate Window", human_duration(cfg.duplicate_window)),
        ("Maximum Messages", human_count(cfg.max_msgs)),
        ("Maximum Per Subject", human_count(cfg.max_msgs_per_subject)),
        ("Maximum Bytes", human_size(cfg.max_bytes)),
        ("Maximum Age", human_duration(cfg.max_age)),
        ("Maximum Message Size", human_size(cfg.max_msg_size)),
        ("Maximum Consumers", human_count(cfg.max_consumers)),
        ("Allows Rollups", cfg.allow_rollup_hdrs),
        ("Deny Deletes", cfg.deny_delete),
        ("Deny Purges", cfg.deny_purge),
    ]
    if cfg.description:
        conf.insert(0, ("Description", cfg.description))
    print(fields(conf) + "\n\nState:\n")
    print(
        fields(
            [
                ("Messages", human_count(st.messages)),
                ("Bytes", human_size(st.bytes)),
                ("First Sequence", f"{st.first_seq} @ {st.first_ts}" if st.first_seq else 0),
                ("Last Sequence", f"{st.last_seq} @ {st.last_ts}" if st.last_seq else 0),
                ("Active Consumers", st.consumer_count),
            ]
        )
    )


async def _stream_rm(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        ok = await _js(c, args).delete_stream(args.name)
    _dump({"success": ok}) if args.json else print(f"Deleted stream {args.name}")
    return 0


async def _stream_purge(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        n = await _js(c, args).purge_stream(args.name, args.subject, args.seq, args.keep)
    _dump({"success": True, "purged": n}) if args.json else print(
        f"Purged {n} messages from {args.name}"
    )
    return 0


async def _stream_get(args: argparse.Namespace) -> int:
    if args.seq is None and not args.last_for:
        raise ValueError("give a sequence or --last-for SUBJECT")
    async with _connect(args) as c:
        msg = await _js(c, args).get_msg(args.name, args.seq, args.last_for, direct=args.direct)
    if args.json:
        out: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq, "time": msg.time}
        out["headers"] = [list(h) for h in msg.headers]
        out["data"] = msg.data.decode(errors="replace")
        _dump(out)
        return 0
    print(f"Item: {args.name}#{msg.seq} received {msg.time} on Subject {msg.subject}\n")
    if msg.headers:
        print("Headers:\n" + "\n".join(f"  {k}: {v}" for k, v in msg.headers) + "\n")
    print(msg.data.decode(errors="replace"))
    return 0


async def _stream_rmm(args: argparse.Namespace) -> int:
    async with _connect(args) as c:
        ok = await _js(c, args).delete_msg(args.name, args.seq, args.erase)
    _dump({"success": ok}) if args.json else print(f"Deleted message {args.seq} from {args.name}")
    return 0

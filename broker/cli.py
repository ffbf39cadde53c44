"""The ``jetmq`` command line.

Every sub-command parses its own arguments; ``main`` returns the process exit
status so tests can call it in-process.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from broker import __version__
from broker.config import (
    DEFAULT_DATA_DIR,
    DEFAULT_LISTEN,
    BrokerConfig,
    ConfigError,
    KeyNames,
    load_config_named,
)
from broker.preflight import check_system
from broker.security.cli import check_security, passwd


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="path to a jetmq.toml file")
    parser.add_argument(
        "--listen",
        action="append",
        default=None,
        metavar="HOST:PORT",
        help=f"address to listen on, repeatable (default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--data-dir", default=None, help=f"data directory (default {DEFAULT_DATA_DIR})"
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jetmq",
        description=(
            "jetmq: an MQTT 5.0 / 3.1.1 / 3.1 broker with JetStream-style persistence in LMDB."
        ),
    )
    parser.add_argument("--version", action="version", version=f"jetmq {__version__}")
    # No command is a usage error (usage on stderr, exit status 2), as argparse reports others.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_config_args(sub.add_parser("serve", help="run the broker"))
    _add_config_args(
        sub.add_parser("check-config", help="validate a configuration and print the result")
    )
    sub.add_parser("pipeline", help="Spark jobs over stored streams (jetmq pipeline --help)")
    pw = sub.add_parser(
        "passwd", help="add or change a user in a password file (mosquitto's $7$ format)"
    )
    pw.add_argument("file", help="the password file (created if missing, mode 0600)")
    pw.add_argument("user", help="the username")
    pw.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    from client.verbs import HELP as CLIENT_HELP  # the client verbs (client/cli.py)

    for verb, text in CLIENT_HELP.items():
        sub.add_parser(verb, help=text, add_help=False)
    _add_admin_args(sub)
    return parser


def _add_admin_args(sub: Any) -> None:
    """The verbs against a running broker (broker.ops.admin)."""
    status = sub.add_parser("status", help="a running broker's summary (its $SYS topics)")
    status.add_argument("--config", default=None, help="jetmq.toml: the broker's address")
    status.add_argument("--broker", default=None, metavar="HOST:PORT", help="MQTT address")
    for verb, what in (("clients", "clients"), ("subs", "subscriptions")):
        p = sub.add_parser(verb, help=f"a running broker's {what} (its HTTP API)")
        p.add_argument("--config", default=None, help="jetmq.toml: its [http] bind")
        p.add_argument("--http", default=None, metavar="HOST:PORT", help="HTTP API address")
        p.add_argument("--json", action="store_true", help="print the JSON as served")
    backup = sub.add_parser("backup", help="copy the store (consistent while the broker runs)")
    backup.add_argument("dir", metavar="DIR", help="a new or empty directory")
    backup.add_argument("--config", default=None, help="jetmq.toml: its [storage] data_dir")
    backup.add_argument("--data-dir", default=None, help="the store to copy")


def _connect_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "*": "127.0.0.1"}.get(host, host)


def _admin(args: argparse.Namespace) -> int:
    from broker.config import parse_listen
    from broker.ops import admin

    try:
        config = load_config_named(args.config)[0]
        if args.command == "status":
            host, port = parse_listen(args.broker or config.listener.listen[0])
            print(admin.format_status(admin.read_sys(_connect_host(host), port)))
        elif args.command in ("clients", "subs"):
            bind = args.http or config.http.bind
            if bind is None:
                raise admin.AdminError("no HTTP API: set [http] bind in --config, or --http")
            host, port = parse_listen(bind)
            path = "/api/clients" if args.command == "clients" else "/api/subscriptions"
            rows = admin.get_json(_connect_host(host), port, path)
            if args.json:
                print(json.dumps(rows, indent=2))
            elif args.command == "clients":
                columns = ["client_id", "connected", "protocol", "subscriptions", "queued"]
                print(admin.format_table(rows, columns))
            else:
                print(admin.format_table(rows, ["client_id", "filter", "qos"]))
        else:
            data_dir = args.data_dir or config.storage.data_dir
            got = admin.backup(data_dir, args.dir)
            print(
                f"backup of {data_dir} in {args.dir}: {got['streams']} streams, {got['bytes']} bytes"
            )
    except (admin.AdminError, ConfigError, ValueError) as exc:
        print(f"jetmq: {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


def _config_from_args(
    args: argparse.Namespace, *, create_data_dir: bool
) -> tuple[BrokerConfig, KeyNames]:
    """The configuration ``serve`` would run with, checked against this machine as well
    (``broker.preflight``): ``check-config`` and ``serve`` refuse the same things."""
    overrides: dict[str, dict[str, Any]] = {}
    flags: dict[tuple[str, str], str] = {}
    for (section, key), flag, value in (
        (("listener", "listen"), "--listen", args.listen),
        (("storage", "data_dir"), "--data-dir", args.data_dir),
    ):
        if value:
            overrides.setdefault(section, {})[key] = value
            flags[section, key] = flag
    config, names = load_config_named(args.config, overrides, flags)
    check_system(config, names, create_data_dir=create_data_dir)
    check_security(config)
    return config, names


def _check_config(args: argparse.Namespace) -> int:
    try:
        config, _names = _config_from_args(args, create_data_dir=False)
    except ConfigError as exc:
        print(f"jetmq: configuration error\n{exc}", file=sys.stderr)
        return 1
    print(f"configuration OK ({args.config or 'embedded defaults'})")
    print(config.model_dump_json(indent=2, by_alias=True))
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        config, names = _config_from_args(args, create_data_dir=True)
    except ConfigError as exc:
        print(f"jetmq: configuration error\n{exc}", file=sys.stderr)
        return 1
    from broker.net.server import run_broker
    from broker.ops import logs
    from broker.ops.service import Operations

    logs.setup(config.log)

    def reload() -> BrokerConfig:  # SIGHUP: the same file and flags, read again
        return _config_from_args(args, create_data_dir=False)[0]

    return run_broker(config, names, Operations(config, reload if args.config else None))


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv)[:1] == ["pipeline"]:
        from pipeline.cli import main as pipeline_main  # lazy: pyspark only when asked

        return pipeline_main(list(sys.argv[2:] if argv is None else argv[1:]))
    args_list = list(sys.argv[1:] if argv is None else argv)
    from client.verbs import VERBS as CLIENT_VERBS

    if args_list[:1] and args_list[0] in CLIENT_VERBS:
        from client.cli import main as client_main  # the client verbs, against a running broker

        return client_main(args_list)
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "passwd":
        return passwd(args.file, args.user, password_stdin=args.password_stdin)
    if args.command in ("status", "clients", "subs", "backup"):
        return _admin(args)
    assert args.command == "check-config"  # the parser allows nothing else
    return _check_config(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

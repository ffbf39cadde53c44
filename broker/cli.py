"""The ``jetmq`` command line.

Every sub-command parses its own arguments; ``main`` returns the process exit
status so tests can call it in-process.
"""

from __future__ import annotations

import argparse
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
    return parser


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
    return config, names


def _check_config(args: argparse.Namespace) -> int:
    try:
        config, _names = _config_from_args(args, create_data_dir=False)
    except ConfigError as exc:
        print(f"jetmq: configuration error\n{exc}", file=sys.stderr)
        return 1
    print(f"configuration OK ({args.config or 'embedded defaults'})")
    print(config.model_dump_json(indent=2))
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
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    assert args.command == "check-config"  # the parser allows nothing else
    return _check_config(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

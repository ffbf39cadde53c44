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
from broker.config import DEFAULT_DATA_DIR, DEFAULT_LISTEN, BrokerConfig, ConfigError, load_config


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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_config_args(sub.add_parser("serve", help="run the broker"))
    _add_config_args(
        sub.add_parser("check-config", help="validate a configuration and print the result")
    )
    sub.add_parser("pipeline", help="Spark jobs over stored streams (jetmq pipeline --help)")
    return parser


def _config_from_args(args: argparse.Namespace) -> BrokerConfig:
    overrides: dict[str, dict[str, Any]] = {}
    if args.listen:
        overrides["listener"] = {"listen": list(args.listen)}
    if args.data_dir:
        overrides["storage"] = {"data_dir": args.data_dir}
    return load_config(args.config, overrides)


def _check_config(args: argparse.Namespace) -> int:
    try:
        config = _config_from_args(args)
    except ConfigError as exc:
        print(f"jetmq: configuration error\n{exc}", file=sys.stderr)
        return 1
    print(f"configuration OK ({args.config or 'embedded defaults'})")
    print(config.model_dump_json(indent=2))
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        config = _config_from_args(args)
    except ConfigError as exc:
        print(f"jetmq: configuration error\n{exc}", file=sys.stderr)
        return 1
    from broker.server import run_broker

    return run_broker(config)


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv)[:1] == ["pipeline"]:
        from pipeline.cli import main as pipeline_main  # lazy: pyspark only when asked

        return pipeline_main(list(sys.argv[2:] if argv is None else argv[1:]))
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "check-config":
        return _check_config(args)
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

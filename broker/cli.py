"""The ``jetmq`` command line.

Every sub-command parses its own arguments; ``main`` returns the process exit
status so tests can call it in-process.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from broker import __version__

DEFAULT_LISTEN = "127.0.0.1:1883"
DEFAULT_DATA_DIR = "./jetmq-data"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jetmq",
        description=(
            "jetmq: an MQTT 5.0 / 3.1.1 / 3.1 broker with JetStream-style persistence in LMDB."
        ),
    )
    parser.add_argument("--version", action="version", version=f"jetmq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument(
        "--listen", default=None, help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})"
    )
    serve.add_argument(
        "--data-dir", default=None, help=f"data directory (default {DEFAULT_DATA_DIR})"
    )
    serve.add_argument("--config", default=None, help="path to a jetmq.toml file")
    return parser


def _serve(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("broker.server") is None:
        print(
            "jetmq serve: the broker is not built yet (broker.server is missing); "
            "the codec, radix index and store land first, see README.md status table.",
            file=sys.stderr,
        )
        return 2
    return 0  # pragma: no cover


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "serve":
        return _serve(args)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The broker's log output: ``[log] level`` and ``format`` ("text" | "json"), on stderr
(the journal takes stderr under systemd), one line per record with a timestamp.

JSON lines carry ``ts`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``msg`` and,
for the connect/disconnect lines, ``client_id``, ``address``, ``protocol`` and ``reason``
(passed as ``extra``). No log line of the broker carries a payload or a password.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from broker.config import LogConfig

FIELDS = ("client_id", "address", "protocol", "reason")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, object] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup(config: LogConfig) -> None:
    """(Re)configure the ``jetmq`` loggers: called at start and on every reload."""
    handler = logging.StreamHandler(sys.stderr)
    if config.format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger("jetmq")
    root.handlers[:] = [handler]
    root.setLevel(config.level.upper())
    root.propagate = False

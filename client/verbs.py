"""The client verbs of ``jetmq`` and their one-line help (read by ``broker/cli.py`` to
list and dispatch them without loading the client)."""

from __future__ import annotations

from typing import Final

HELP: Final = {
    "stream": "administer JetStream streams of a running broker (ls|add|info|edit|rm|purge|get|rmm)",
    "consumer": "administer JetStream consumers (ls|add|info|edit|rm|next)",
    "pub": "publish a message",
    "sub": "subscribe and print messages",
    "req": "send a request and print the answer",
}
VERBS: Final = tuple(HELP)

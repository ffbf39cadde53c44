"""What ``jetmq serve`` needs from the machine, checked before it starts, and by
``jetmq check-config`` too, so that a configuration one accepts the other accepts.

* Every listen address resolves (``getaddrinfo`` as trio's ``open_tcp_listeners``
  calls it) and every address it yields can be bound: a socket set up as trio sets
  it up binds to it, on the configured port, and is closed at once. An address of
  another machine (``EADDRNOTAVAIL``) or a port below 1024 without the privilege
  (``EACCES``) is an error; a port in use is not, here: ``check-config`` is run
  beside the running broker whose file it checks, and at start ``broker.server``
  names the address it could not bind.
* The data directory is a directory we may write, or can be made one. ``serve``
  creates it here (the store would anyway); ``check-config``, which changes
  nothing, requires the nearest existing parent to be a writable directory.

Each problem is one line of the ``ConfigError``, naming the key or flag (``KeyNames``),
the value and the cause.
"""

from __future__ import annotations

import errno
import os
import pathlib
import socket

from broker.config import BrokerConfig, ConfigError, KeyNames, parse_listen, show_value

_LISTEN = ("listener", "listen")
_DATA_DIR = ("storage", "data_dir")


def check_system(config: BrokerConfig, names: KeyNames, *, create_data_dir: bool) -> None:
    """Raise ConfigError listing every problem found (nothing found: return)."""
    old_form = "listener" in config.model_fields_set and "listeners" not in config.model_fields_set
    key = _LISTEN if old_form else ("listeners", "bind")
    problems = [
        f"{names(key)}: {show_value(spec.bind)}: {problem}"
        for spec in config.listener_specs()
        if (problem := _listen_problem(spec.bind)) is not None
    ]
    data_dir = config.storage.data_dir
    problem = _data_dir_problem(pathlib.Path(data_dir), create=create_data_dir)
    if problem is not None:
        problems.append(f"{names(_DATA_DIR)}: {show_value(data_dir)}: {problem}")
    if problems:
        raise ConfigError("\n".join(problems))


def _listen_problem(text: str) -> str | None:
    host, port = parse_listen(text)  # validated with the configuration already
    try:
        infos = socket.getaddrinfo(
            host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return f"cannot resolve {host!r}: {exc.strerror}"
    for family, kind, proto, _name, address in infos:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            if exc.errno == errno.EAFNOSUPPORT:
                continue  # trio skips the families the kernel lacks, and so do we
            raise
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    continue
                return f"cannot listen on {address[0]} port {port}: {exc.strerror}"
    return None


def _data_dir_problem(path: pathlib.Path, *, create: bool) -> str | None:
    # os.path's predicates, not pathlib's: they answer False instead of raising.
    if os.path.lexists(path):
        if not os.path.isdir(path):
            return "not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return "not writable"
        return None
    parent = path.absolute().parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not os.path.isdir(parent):
        return f"cannot create it: {str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create it: {str(parent)!r} is not writable"
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # what os.access cannot tell (a read-only file system, root)
            return f"cannot create it: {exc.strerror}"
    return None

"""systemd's notification protocol (``sd_notify(3)``) and socket activation
(``sd_listen_fds(3)``), in a few lines of our own.

Why not the ``sdnotify`` package: the protocol is one datagram per message on the
AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` names the abstract
namespace), which is less code than the dependency's glue; it lets us keep the socket
open non-blocking (a notification never waits, and a full or gone socket only drops
it), and socket activation, which ``sdnotify`` does not cover, lives beside it.

Nothing here imports trio: every call is a non-blocking ``sendto`` or an ``os`` call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time

log = logging.getLogger("jetmq.ops")

SD_LISTEN_FDS_START = 3


class Notifier:
    """Sends ``KEY=VALUE`` lines to the service manager; a no-op outside systemd (no
    ``$NOTIFY_SOCKET``)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = None
        self._sock: socket.socket | None = None
        if path and path[0] in "@/":
            self._address = b"\0" + path[1:].encode() if path[0] == "@" else path
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)
        # The watchdog period systemd expects (WatchdogSec=), when it is meant for us.
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        self.watchdog_usec = (
            int(usec) if usec.isdigit() and (not pid or pid == str(os.getpid())) else 0
        )

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, *lines: str) -> bool:
        """One datagram of ``lines``; False when it could not be sent (logged at debug)."""
        sock, address = self._sock, self._address
        if sock is None or address is None:
            return False
        try:
            sock.sendto("\n".join(lines).encode(), address)
        except OSError as exc:
            log.debug("sd_notify %r failed: %s", lines, exc)
            return False
        return True

    def ready(self, status: str = "") -> None:
        self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> None:
        # MONOTONIC_USEC lets systemd tell this reload from an earlier one (Type=notify-reload).
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> None:
        self.notify("STOPPING=1")

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def listen_fds(environ: dict[str, str] | None = None, *, unset: bool = True) -> list[socket.socket]:
    """The listening sockets systemd passed (``LISTEN_FDS`` from fd 3, for this process:
    ``LISTEN_PID``), named by ``LISTEN_FDNAMES`` (logged). With ``unset`` the variables are
    removed so that a child process does not take them too. Only stream sockets are kept
    (jetmq listens for TCP); any other is logged and closed."""
    env = os.environ if environ is None else environ
    pid, count = env.get("LISTEN_PID", ""), env.get("LISTEN_FDS", "")
    names = env.get("LISTEN_FDNAMES", "").split(":")
    if unset:
        for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            env.pop(key, None)
    if not count.isdigit() or pid != str(os.getpid()):
        return []
    out: list[socket.socket] = []
    for i in range(int(count)):
        fd = SD_LISTEN_FDS_START + i
        name = names[i] if i < len(names) else ""
        with contextlib.suppress(OSError):
            os.set_inheritable(fd, False)
        sock = socket.socket(fileno=fd)
        if sock.type != socket.SOCK_STREAM:
            log.warning("socket activation: fd %d (%s) is not a stream socket: closed", fd, name)
            sock.close()
            continue
        log.info("socket activation: listening on fd %d (%s) %s", fd, name, sock.getsockname())
        out.append(sock)
    return out

"""What ``jetmq`` needs from this package: ``jetmq passwd``, the start-up checks of
``[auth]`` (shared by ``serve`` and ``check-config``), the ``[listener]`` deprecation."""

from __future__ import annotations

import getpass
import sys
import tomllib

from broker.config import BrokerConfig, ConfigError, KeyNames
from broker.security import acl, passwords
from broker.security.policy import startup_problem


def check_security(config: BrokerConfig) -> None:
    """Raise ConfigError when the broker must not start: exposed without ``[auth]``
    (``policy``), or a password / ACL file that does not load (file, line, problem)."""
    problem = startup_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    auth = config.auth
    try:
        if auth.password_file:
            passwords.load(auth.password_file)
        if auth.acl_file:
            acl.load(auth.acl_file)
    except (passwords.PasswordFileError, acl.AclFileError) as exc:
        key = (
            "auth.password_file"
            if isinstance(exc, passwords.PasswordFileError)
            else "auth.acl_file"
        )
        raise ConfigError(f"{key}: {exc}") from exc


def old_listener_warning(names: KeyNames) -> str | None:
    """The log line for a file that still uses ``[listener] listen = [...]`` (the server
    logs it once listening, so a failed start stays one line)."""
    if names.text is None:
        return None
    try:
        data = tomllib.loads(names.text)
    except tomllib.TOMLDecodeError:
        return None
    if "listener" not in data:
        return None
    return (
        f"{names.path}: [listener] is deprecated: write one [[listeners]] table per address"
        ' (bind = "HOST:PORT"); it keeps working for now'
    )


def passwd(path: str, user: str, *, password_stdin: bool) -> int:
    """``jetmq passwd FILE USER``: prompt twice (or read one line from stdin), write a
    ``$7$`` PBKDF2-SHA512 hash (``passwords.ITERATIONS`` rounds)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        if not sys.stdin.isatty():
            print(
                "jetmq passwd: no terminal to prompt on: pipe the password with --password-stdin",
                file=sys.stderr,
            )
            return 1
        try:
            password = getpass.getpass(f"Password for {user}: ")
            again = getpass.getpass("Again: ")
        except (EOFError, KeyboardInterrupt):
            print("\njetmq passwd: nothing written", file=sys.stderr)
            return 1
        if again != password:
            print("jetmq passwd: the passwords differ, nothing written", file=sys.stderr)
            return 1
    if not password:
        print("jetmq passwd: an empty password is refused", file=sys.stderr)
        return 1
    try:
        new = passwords.set_password(path, user, password)
    except (OSError, ValueError) as exc:
        print(f"jetmq passwd: {path}: {exc}", file=sys.stderr)
        return 1
    print(f"jetmq passwd: {'added' if new else 'changed'} user {user!r} in {path}")
    return 0

"""Password files in mosquitto's format, one ``username:hash`` a line:

* ``$7$ITERATIONS$SALT$HASH``: PBKDF2-HMAC-SHA512 (mosquitto 2's default), base64 salt and
  64-byte derived key;
* ``$6$SALT$HASH``: one SHA-512 of password then salt (mosquitto 1.x's ``sha512``; not
  glibc's sha512-crypt, which shares the prefix but not the format).

Hashing is the standard library's (``hashlib.pbkdf2_hmac``, ``hashlib.sha512``);
comparisons are constant time (``hmac.compare_digest``). ``jetmq passwd`` writes ``$7$``
with ``ITERATIONS`` rounds (OWASP's 2023 figure for PBKDF2-HMAC-SHA512), so a file moves
both ways between jetmq and mosquitto (mosquitto reads any iteration count).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import pathlib
import tempfile
from dataclasses import dataclass

ITERATIONS = 210_000  # PBKDF2-HMAC-SHA512 rounds written by ``jetmq passwd``
SALT_BYTES = 12  # as mosquitto_passwd
MAX_ITERATIONS = 10_000_000  # a file asking for more is refused (a CPU trap)


class PasswordFileError(ValueError):
    """A password file that cannot be used: the file, the line and what is wrong."""


@dataclass(frozen=True, slots=True)
class Hashed:
    """One parsed hash: its scheme (6 or 7), rounds (7 only), salt and digest."""

    scheme: int
    iterations: int
    salt: bytes
    digest: bytes

    def verify(self, password: bytes) -> bool:
        """Whether ``password`` matches (slow for ``$7$``: call it off the event loop)."""
        if self.scheme == 7:
            got = hashlib.pbkdf2_hmac(
                "sha512", password, self.salt, self.iterations, len(self.digest)
            )
        else:
            got = hashlib.sha512(password + self.salt).digest()
        return hmac.compare_digest(got, self.digest)


def _b64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def parse_hash(text: str) -> Hashed:
    """Parse one hash field; ValueError says what is wrong (never the hash itself)."""
    parts = text.split("$")
    try:
        if len(parts) == 5 and parts[0] == "" and parts[1] == "7":
            iterations = int(parts[2])
            if not 1 <= iterations <= MAX_ITERATIONS:
                raise ValueError(f"iteration count {iterations} out of range")
            return Hashed(7, iterations, _b64(parts[3]), _b64(parts[4]))
        if len(parts) == 4 and parts[0] == "" and parts[1] == "6":
            digest = _b64(parts[3])
            if len(digest) != 64:
                raise ValueError("a $6$ hash must be 64 bytes (mosquitto's sha512)")
            return Hashed(6, 0, _b64(parts[2]), digest)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError("salt or hash is not valid base64") from exc
    raise ValueError("not a mosquitto hash ($7$ PBKDF2-SHA512 or $6$ SHA-512)")


def hash_password(password: str, *, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    """The ``$7$`` hash ``jetmq passwd`` writes."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, 64)
    b64 = base64.b64encode
    return f"$7${iterations}${b64(salt).decode()}${b64(digest).decode()}"


def load(path: str | pathlib.Path) -> dict[str, Hashed]:
    """Read a password file; PasswordFileError names the file and line of any problem.
    Blank lines and ``#`` comments are skipped, as mosquitto does."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PasswordFileError(f"{path}: cannot read: {exc}") from exc
    users: dict[str, Hashed] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, field = line.rpartition(":")
        if not sep or not user:
            raise PasswordFileError(f"{path}: line {number}: expected USER:HASH")
        try:
            users[user] = parse_hash(field)
        except ValueError as exc:
            raise PasswordFileError(f"{path}: line {number}: user {user!r}: {exc}") from exc
    return users


def set_password(path: str | pathlib.Path, user: str, password: str) -> bool:
    """Add or replace ``user`` in the file (created if missing, mode 0600), atomically
    (a temporary file renamed over it). True when the user was new."""
    if not user or ":" in user or "\n" in user:
        raise ValueError("a username must be non-empty, without ':' or a line break")
    target = pathlib.Path(path)
    lines: list[str] = []
    if target.exists():
        lines = target.read_text(encoding="utf-8").splitlines()
    entry = f"{user}:{hash_password(password)}"
    new = True
    for i, line in enumerate(lines):
        if line.rpartition(":")[0] == user and not line.lstrip().startswith("#"):
            lines[i] = entry
            new = False
    if new:
        lines.append(entry)
    fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return new

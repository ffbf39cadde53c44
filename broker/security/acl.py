"""ACL files in mosquitto's syntax, and each client's access decided from them.

Syntax (one rule a line, ``#`` comments)::

    topic [read|write|readwrite|deny] TOPIC    # before any ``user`` line: anonymous clients
    user USERNAME                              # the ``topic`` lines below are USERNAME's
    topic [read|write|readwrite|deny] TOPIC
    pattern [read|write|readwrite|deny] TOPIC  # every client; %c = client id, %u = username

No access word means ``readwrite``. ``deny`` wins over any grant. A topic is matched with
MQTT's rules, so a rule starting with ``+`` or ``#`` never matches ``$SYS/...`` or
``$JS/...``: those need rules naming them.

A ``%c`` / ``%u`` value is one literal level: it never acts as a wildcard and never adds a
level. A grant pattern whose value is missing (an anonymous client's ``%u``) or holds
``+``, ``#`` or ``/`` grants nothing; a deny pattern in that case denies as if the level
were ``+`` (wider, never narrower).

Decisions (``ClientAccess``):

* PUBLISH and delivery of a topic: no deny rule matches it and a grant with that access
  does (cached per client and topic);
* SUBSCRIBE, per filter (``$share/NAME/`` removed): granted when a ``read`` grant *covers*
  the filter (every topic the filter can match, the grant matches) and no deny rule
  *overlaps* it (no topic matches both). So with ``topic read a/#`` and ``topic deny
  a/secret/#``, ``a/#`` is refused and ``a/public/#`` granted.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

READ = 1
WRITE = 2
DENY = 4
_ACCESS = {"read": READ, "write": WRITE, "readwrite": READ | WRITE, "deny": DENY}
_SPECIAL = ("+", "#", "/")
CACHE_LIMIT = 4096  # topics remembered per client; the cache starts over when full
CACHED_TOPIC_MAX = 1024  # longer topics are decided every time (memory: see broker.core.router)

Levels = tuple[str, ...]


class AclFileError(ValueError):
    """An ACL file that cannot be used: the file, the line and what is wrong."""


@dataclass(frozen=True, slots=True)
class Rule:
    access: int
    levels: Levels  # '%c' / '%u' inside a level are substituted per client


@dataclass(slots=True)
class AclFile:
    """A parsed ACL file: the anonymous section, each user's rules, the patterns."""

    anonymous: list[Rule] = field(default_factory=list)
    users: dict[str, list[Rule]] = field(default_factory=dict)
    patterns: list[Rule] = field(default_factory=list)

    def rules_for(self, client_id: str, username: str | None) -> list[tuple[int, Levels]]:
        """The rules that apply to one client, patterns substituted."""
        own = self.users.get(username, []) if username is not None else self.anonymous
        out = [(r.access, r.levels) for r in own]
        for rule in self.patterns:
            levels = _substitute(rule, client_id, username)
            if levels is not None:
                out.append((rule.access, levels))
        return out

    def access_for(self, client_id: str, username: str | None) -> ClientAccess:
        return ClientAccess(self.rules_for(client_id, username), (client_id, username))


def _substitute(rule: Rule, client_id: str, username: str | None) -> Levels | None:
    out: list[str] = []
    for level in rule.levels:
        if "%" not in level:
            out.append(level)
            continue
        unusable = False
        text = level
        for token, value in (("%c", client_id), ("%u", username)):
            if token in text:
                if value is None or not value or any(ch in value for ch in _SPECIAL):
                    unusable = True
                else:
                    text = text.replace(token, value)
        if unusable:
            if rule.access & DENY:
                out.append("+")  # deny wider, never narrower
                continue
            return None  # a grant that cannot be made safe grants nothing
        out.append("\0" + text)  # a literal level: never a wildcard
    return tuple(out)


def parse(text: str, source: str = "<acl>") -> AclFile:
    acl = AclFile()
    current: list[Rule] = acl.anonymous
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        where = f"{source}: line {number}"
        if word == "user":
            if not rest:
                raise AclFileError(f"{where}: 'user' needs a username")
            current = acl.users.setdefault(rest, [])
            continue
        if word not in ("topic", "pattern"):
            raise AclFileError(f"{where}: unknown keyword {word!r} (user, topic or pattern)")
        access = READ | WRITE
        first, _, after = rest.partition(" ")
        if first in _ACCESS and after.strip():
            access = _ACCESS[first]
            rest = after.strip()
        if not rest:
            raise AclFileError(f"{where}: {word!r} needs a topic")
        levels = tuple(rest.split("/"))
        for i, level in enumerate(levels):
            if ("#" in level and (level != "#" or i != len(levels) - 1)) or (
                "+" in level and level != "+"
            ):
                raise AclFileError(f"{where}: invalid topic filter {rest!r}")
        if word == "topic" and "%" in rest:
            raise AclFileError(f"{where}: %c / %u only work in 'pattern' lines")
        rule = Rule(access, levels)
        (acl.patterns if word == "pattern" else current).append(rule)
    return acl


def load(path: str | pathlib.Path) -> AclFile:
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AclFileError(f"{path}: cannot read: {exc}") from exc
    return parse(text, str(path))


# -- matching ------------------------------------------------------------------------------


def _lit(level: str) -> str:
    return level[1:] if level[:1] == "\0" else level


def _dollar(level: str | None) -> bool:
    return level is not None and level not in ("+", "#") and _lit(level)[:1] == "$"


def matches(rule: Levels, topic: Sequence[str]) -> bool:
    """MQTT matching of a topic (no wildcards) against a rule."""
    if topic and topic[0][:1] == "$" and rule and rule[0] in ("+", "#"):
        return False
    n = len(topic)
    for i, level in enumerate(rule):
        if level == "#":
            return True
        if i >= n:
            return False
        if level != "+" and _lit(level) != topic[i]:
            return False
    return len(rule) == n


def covers(rule: Levels, flt: Sequence[str]) -> bool:
    """Every topic ``flt`` can match, ``rule`` matches."""
    n = len(rule)
    for i, fl in enumerate(flt):
        if i >= n:
            return False
        rl = rule[i]
        if rl in ("#", "+") and i == 0 and _dollar(fl):
            return False
        if rl == "#":
            return True
        if fl == "#":
            return False
        if rl == "+":
            continue
        if fl == "+" or _lit(rl) != fl:
            return False
    if len(flt) < n:
        return len(flt) + 1 == n and rule[-1] == "#"
    return True


def overlaps(a: Levels, b: Sequence[str]) -> bool:
    """Some topic matches both ``a`` and ``b``."""
    for i in range(max(len(a), len(b))):
        al = a[i] if i < len(a) else None
        bl = b[i] if i < len(b) else None
        if al == "#" or bl == "#":
            other = bl if al == "#" else al
            return not (i == 0 and _dollar(other))
        if al is None or bl is None:
            return False
        if al == "+" or bl == "+":
            if i == 0 and (_dollar(al) or _dollar(bl)):
                return False
            continue
        if _lit(al) != _lit(bl):
            return False
    return True


class ClientAccess:
    """What one client may do (see module docstring); decisions per topic are cached."""

    __slots__ = ("_cache", "_deny", "_read", "_write", "who")

    def __init__(
        self, rules: Iterable[tuple[int, Levels]], who: tuple[str, str | None] = ("", None)
    ) -> None:
        self.who = who  # (client id, username): rebuilt from these on reload
        self._deny: list[Levels] = []
        self._read: list[Levels] = []
        self._write: list[Levels] = []
        for access, levels in rules:
            if access & DENY:
                self._deny.append(levels)
            if access & READ:
                self._read.append(levels)
            if access & WRITE:
                self._write.append(levels)
        self._cache: dict[bytes, int] = {}

    def _decide(self, topic: bytes) -> int:
        levels = topic.decode("utf-8", "replace").split("/")
        bits = 0
        if not any(matches(d, levels) for d in self._deny):
            if any(matches(r, levels) for r in self._read):
                bits |= READ
            if any(matches(w, levels) for w in self._write):
                bits |= WRITE
        if len(topic) <= CACHED_TOPIC_MAX:
            cache = self._cache
            if len(cache) >= CACHE_LIMIT:
                cache.clear()
            cache[topic] = bits
        return bits

    def may_read(self, topic: bytes) -> bool:
        """Whether a message on ``topic`` may be delivered to this client."""
        bits = self._cache.get(topic)
        if bits is None:
            bits = self._decide(topic)
        return bool(bits & READ)

    def may_write(self, topic: bytes) -> bool:
        """Whether this client may publish on ``topic`` (wills included)."""
        bits = self._cache.get(topic)
        if bits is None:
            bits = self._decide(topic)
        return bool(bits & WRITE)

    def may_subscribe(self, topic_filter: bytes) -> bool:
        """Whether a (non-shared) filter may be subscribed (see module docstring)."""
        levels = topic_filter.decode("utf-8", "replace").split("/")
        if any(overlaps(d, levels) for d in self._deny):
            return False
        return any(covers(r, levels) for r in self._read)

"""The broker's security state: who may connect (``[auth]``: anonymous or not, the
password file, client-certificate identities) and what each client may do (the ACL
file). ``Security`` is the net layer's ``Authenticator``; ``reload`` swaps files in
atomically (a file that does not load keeps the old state and says why).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass

import trio

from broker.config import AuthConfig, BrokerConfig
from broker.mqtt.packets import Connect
from broker.mqtt.reason_codes import ReasonCode
from broker.security import acl as aclmod
from broker.security import passwords
from broker.security.backoff import Backoff
from broker.security.policy import allow_anonymous

log = logging.getLogger("jetmq.auth")

VERIFIED_CACHE = 10_000  # (user, password) checks remembered (keyed digests, never text)


@dataclass(slots=True)
class PeerInfo:
    """What the transport knows about a connecting client; ``username`` is set by
    ``authenticate`` to the identity the ACL uses."""

    address: str
    cert_cn: str | None = None
    identity_as_username: bool = False
    username: str | None = None


@dataclass(frozen=True, slots=True)
class _State:
    allow_anonymous: bool
    users: dict[str, passwords.Hashed] | None
    acl: aclmod.AclFile | None
    password_file: str | None
    acl_file: str | None


def _load(auth: AuthConfig, anonymous: bool) -> _State:
    users = passwords.load(auth.password_file) if auth.password_file else None
    acl = aclmod.load(auth.acl_file) if auth.acl_file else None
    return _State(anonymous, users, acl, auth.password_file, auth.acl_file)


def needed(config: BrokerConfig) -> bool:
    """Whether the configuration asks for any check at CONNECT (else the broker keeps its
    fast path: no authenticator at all)."""
    auth = config.auth
    return bool(
        auth.password_file
        or auth.acl_file
        or not allow_anonymous(config)
        or any(spec.use_identity_as_username for spec in config.listener_specs())
    )


class Security:
    """See module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        """Raises ``PasswordFileError`` / ``AclFileError`` (the broker refuses to start)."""
        self._state = _load(config.auth, allow_anonymous(config))
        self.backoff = Backoff()
        self._key = os.urandom(32)  # keys the cache of verified passwords
        self._verified: dict[tuple[str, passwords.Hashed], bytes] = {}

    @property
    def acl(self) -> aclmod.AclFile | None:
        return self._state.acl

    def reload(self, config: BrokerConfig) -> str | None:
        """Read the password and ACL files again (SIGHUP). Both load, or nothing changes:
        the reason is returned (and logged) and the old state stays."""
        try:
            state = _load(config.auth, allow_anonymous(config))
        except (passwords.PasswordFileError, aclmod.AclFileError) as exc:
            log.error("reload: kept the previous users and ACL: %s", exc)
            return str(exc)
        self._state = state
        self._verified.clear()
        log.info(
            "reload: %s users, ACL %s",
            "no" if state.users is None else len(state.users),
            state.acl_file or "none",
        )
        return None

    def access_for(self, client_id: str, username: str | None) -> aclmod.ClientAccess | None:
        """A client's ACL decisions (None: no ACL file, everything is allowed)."""
        acl = self._state.acl
        return None if acl is None else acl.access_for(client_id, username)

    async def authenticate(self, connect: Connect, peer: PeerInfo) -> tuple[ReasonCode, str] | None:
        refusal = await self._check(connect, peer)
        now = trio.current_time()
        host = peer.address.rpartition(":")[0] or peer.address  # per address, not port
        if refusal is None:
            self.backoff.succeeded(host)
            return None
        delay = self.backoff.delay(host, now)
        count = self.backoff.failed(host, now)
        log.warning(
            "refused CONNECT from %s client %r username %r: %s (failure %d in a row%s)",
            peer.address,
            connect.client_id,
            connect.username,
            refusal[1],
            count,
            f", answered after {delay:.1f} s" if delay else "",
        )
        if delay:
            await trio.sleep(delay)
        return refusal

    async def _check(self, connect: Connect, peer: PeerInfo) -> tuple[ReasonCode, str] | None:
        state = self._state
        if peer.identity_as_username:
            if peer.cert_cn is None:
                return ReasonCode.NOT_AUTHORIZED, "a client certificate is required"
            peer.username = peer.cert_cn
            return None
        username = connect.username
        if username is None:
            if state.allow_anonymous:
                return None
            return ReasonCode.NOT_AUTHORIZED, "anonymous clients are not allowed"
        if state.users is None:
            if state.allow_anonymous:
                peer.username = username
                return None
            return ReasonCode.NOT_AUTHORIZED, "no password file: usernames are not checked"
        hashed = state.users.get(username)
        password = connect.password or b""
        if hashed is None:
            return ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown user or bad password"
        key = (username, hashed)
        tag = hashlib.blake2b(password, key=self._key, digest_size=32).digest()
        if self._verified.get(key) != tag:
            if not await trio.to_thread.run_sync(hashed.verify, password):
                return ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown user or bad password"
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.clear()
            self._verified[key] = tag
        peer.username = username
        return None

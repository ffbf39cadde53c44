"""The start-up rule (mosquitto 2's, said better): a broker listening beyond loopback
with ``[auth]`` saying nothing about who may connect refuses to start."""

from __future__ import annotations

import ipaddress

from broker.config import BrokerConfig


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def allow_anonymous(config: BrokerConfig) -> bool:
    """``auth.allow_anonymous``, or when unset: true when every listener is on loopback and
    no password file is given."""
    auth = config.auth
    if auth.allow_anonymous is not None:
        return auth.allow_anonymous
    if auth.password_file is not None:
        return False
    return all(is_loopback(spec.address()[0]) for spec in config.listener_specs())


def startup_problem(config: BrokerConfig) -> str | None:
    """What to add to the configuration before the broker may start, or None."""
    auth = config.auth
    if auth.allow_anonymous is not None or auth.password_file is not None:
        return None
    exposed = [spec.bind for spec in config.listener_specs() if not is_loopback(spec.address()[0])]
    if not exposed or all(
        spec.use_identity_as_username
        for spec in config.listener_specs()
        if not is_loopback(spec.address()[0])
    ):
        return None
    return (
        f"listening on {', '.join(exposed)} (not a loopback address) with no [auth] settings:"
        " anyone could connect. Add to the configuration either\n"
        "  [auth]\n"
        '  password_file = "/etc/jetmq/passwd"   # create it: jetmq passwd /etc/jetmq/passwd USER\n'
        "or, to let clients connect without a username on purpose,\n"
        "  [auth]\n"
        "  allow_anonymous = true"
    )

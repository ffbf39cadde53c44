"""The jobs' TLS flags (``--tls-ca-file``, ``--tls-cert-file``, ``--tls-key-file``,
``--tls-insecure``) for an ``mqtts://`` ``--url``, turned into the source and sink options
(:data:`pipeline.mqttpub.TLS_OPTIONS`)."""

from __future__ import annotations

import argparse


def add_tls_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca-file", default=None, metavar="PEM", help="CA for an mqtts:// --url")
    p.add_argument("--tls-cert-file", default=None, metavar="PEM", help="client certificate")
    p.add_argument("--tls-key-file", default=None, metavar="PEM", help="its private key")
    p.add_argument("--tls-insecure", action="store_true", help="no certificate check (tests only)")


def tls_options(args: argparse.Namespace) -> dict[str, str]:
    """The Spark options of the TLS flags given."""
    out = {
        "tlsCaFile": getattr(args, "tls_ca_file", None),
        "tlsCertFile": getattr(args, "tls_cert_file", None),
        "tlsKeyFile": getattr(args, "tls_key_file", None),
        "tlsInsecure": "true" if getattr(args, "tls_insecure", False) else None,
    }
    return {k: v for k, v in out.items() if v}

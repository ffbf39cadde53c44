"""``mqtts://`` for the sink and for ``url=`` reads: a broker with a TLS listener and
certificates made at test time (trustme, as tests/security does), the pipeline's own
clients (:class:`pipeline.mqttpub.Publisher`, :mod:`pipeline.netread`) with the Spark
options ``tlsCaFile`` / ``tlsCertFile`` / ``tlsKeyFile`` / ``tlsInsecure``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipeline import batches, netread
from pipeline.mqttpub import Publisher, parse_url
from pipeline.options import OptionError, parse_source_options
from pipeline.sink import parse_sink_options
from tests.broker.harness import BrokerThread
from tests.security.conftest import Certs, certs, start_broker  # noqa: F401 (fixtures)
from tests.security.test_tls import tls_toml

pytestmark = pytest.mark.timeout(60)


def _tls_broker(made: Certs, start: Callable[[str], BrokerThread], **extra: str) -> str:
    broker = start(tls_toml(made, **extra))
    return f"mqtts://127.0.0.1:{broker.port}"


def test_sink_and_url_reads_over_tls(
    certs: Certs,  # noqa: F811
    start_broker: Callable[[str], BrokerThread],  # noqa: F811
) -> None:
    url = _tls_broker(certs, start_broker)
    opts = {"url": url, "tlsCaFile": str(certs.ca_file)}
    address = parse_sink_options(opts).address
    assert address.tls
    link = netread.JsLink(address)
    try:
        made = link.request("STREAM/CREATE/T", {"name": "T", "subjects": ["t.>"]})
        assert made["config"]["name"] == "T"
    finally:
        link.close()
    pub = Publisher(address)
    try:
        for i in range(30):
            pub.publish(f"t/d{i % 2}", b"m%d" % i, qos=1)
        pub.flush()
    finally:
        pub.close()
    src = parse_source_options({**opts, "pullBatch": "8"})
    metas = netread.stream_metas(src.broker())
    assert metas["T"].last_seq == 30
    link = netread.JsLink(src.broker())
    try:
        rows = [
            batches.records_batch("T", seqs, None, raw=raw)
            for seqs, raw in netread.scan(link, "T", 1, 30, src.pull_batch)
        ]
    finally:
        link.close()
    seqs = [s for b in rows for s in b.column("seq").to_pylist()]
    payloads = [p for b in rows for p in b.column("payload").to_pylist()]
    assert seqs == list(range(1, 31))
    assert payloads == [b"m%d" % i for i in range(30)]
    assert rows[0].column("topic").to_pylist()[:2] == ["t/d0", "t/d1"]


def test_client_certificates_and_the_insecure_flag(
    certs: Certs,  # noqa: F811
    start_broker: Callable[[str], BrokerThread],  # noqa: F811
) -> None:
    url = _tls_broker(certs, start_broker, ca=f'"{certs.ca_file}"', require_client_cert="true")
    cert, key = certs.client("spark")
    good = parse_url(url, {"tlsCaFile": str(certs.ca_file), "tlsCertFile": cert, "tlsKeyFile": key})
    netread.JsLink(good).close()
    without = parse_url(url, {"tlsCaFile": str(certs.ca_file)})
    with pytest.raises(netread.NetReadError):
        netread.JsLink(without, timeout=5).close()
    # the system trust store does not know the test CA; tlsInsecure skips the check
    with pytest.raises(netread.NetReadError):
        netread.JsLink(parse_url(url), timeout=5).close()
    insecure = parse_url(url, {"tlsInsecure": "true", "tlsCertFile": cert, "tlsKeyFile": key})
    netread.JsLink(insecure).close()


def test_bad_tls_options_are_clear_errors(tmp_path: object) -> None:
    with pytest.raises(OptionError, match="'tlsCaFile' needs an mqtts:// url"):
        parse_source_options({"url": "mqtt://127.0.0.1:1883", "tlsCaFile": "/etc/hostname"})
    with pytest.raises(OptionError, match="no such file"):
        parse_sink_options({"url": "mqtts://127.0.0.1", "tlsCaFile": "/nope/ca.pem"})
    with pytest.raises(OptionError, match="go together"):
        parse_sink_options({"url": "mqtts://127.0.0.1", "tlsCertFile": "/etc/hostname"})
    with pytest.raises(OptionError, match="true or false"):
        parse_sink_options({"url": "mqtts://127.0.0.1", "tlsInsecure": "maybe"})
    assert parse_url("mqtts://h").port == 8883


def test_the_jobs_tls_flags_reach_the_broker(
    certs: Certs,  # noqa: F811
    start_broker: Callable[[str], BrokerThread],  # noqa: F811
) -> None:
    from pipeline.cli import _parser
    from pipeline.jobs.rollup import source_streams
    from pipeline.jobs.tlsflags import tls_options

    url = _tls_broker(certs, start_broker)
    link = netread.JsLink(parse_url(url, {"tlsCaFile": str(certs.ca_file)}))
    try:
        link.request("STREAM/CREATE/J", {"name": "J", "subjects": ["j"]})
    finally:
        link.close()
    args = _parser().parse_args(
        [
            "archive",
            "--stream",
            "J",
            "--to",
            "out",
            "--url",
            url,
            "--tls-ca-file",
            str(certs.ca_file),
        ]
    )
    assert tls_options(args) == {"tlsCaFile": str(certs.ca_file)}
    assert set(source_streams(args)) == {"J"}
    args = _parser().parse_args(
        ["rollup", "--stream", "J", "--schema", "v int", "--to", "out", "--url", url,
         "--via-broker", "--tls-insecure"]
    )  # fmt: skip
    assert tls_options(args) == {"tlsInsecure": "true"}
    assert set(source_streams(args)) == {"J"}

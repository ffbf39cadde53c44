"""``[jetstream]`` configuration: the account limits and their errors."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from broker.config import ConfigError, load_config
from tests.broker.harness import BrokerThread
from tests.jetstream.jsclient import JsClient

pytestmark = pytest.mark.timeout(60)


def _err(out: dict[str, object]) -> object:
    error = out.get("error")
    assert isinstance(error, dict), out
    return error["err_code"], error["description"]


def test_max_streams_and_max_consumers(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(max_streams=1, max_consumers=1)
    js = JsClient(broker.port)
    try:
        assert "error" not in js.request(
            "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]}
        )
        # The same stream again (idempotent) and an update still go through.
        assert "error" not in js.request(
            "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]}
        )
        out = js.request("$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["b"]})
        assert _err(out) == (10027, "maximum number of streams reached")
        cfg = {"stream_name": "A", "config": {"name": "C1"}}
        assert "error" not in js.request("$JS.API.CONSUMER.CREATE.A.C1", cfg)
        assert "error" not in js.request("$JS.API.CONSUMER.CREATE.A.C1", cfg)
        out = js.request(
            "$JS.API.CONSUMER.CREATE.A.C2", {"stream_name": "A", "config": {"name": "C2"}}
        )
        assert _err(out) == (10026, "maximum consumers limit reached")
        info = js.request("$JS.API.INFO")
        assert info["limits"]["max_streams"] == 1
        assert info["limits"]["max_consumers"] == 1
        assert (info["streams"], info["consumers"]) == (1, 1)
    finally:
        js.close()


def test_max_bytes_is_a_reservation(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(max_bytes=1000)
    js = JsClient(broker.port)
    try:
        out = js.request("$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]})
        assert _err(out) == (10113, "account requires a stream config to have max bytes set")
        cfg = {"name": "A", "subjects": ["a"], "max_bytes": 600}
        assert "error" not in js.request("$JS.API.STREAM.CREATE.A", cfg)
        out = js.request(
            "$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["b"], "max_bytes": 600}
        )
        assert _err(out) == (10023, "insufficient resources")
        assert "error" not in js.request("$JS.API.STREAM.UPDATE.A", {**cfg, "max_bytes": 1000})
        assert js.request("$JS.API.INFO")["limits"]["max_bytes_required"] is True
    finally:
        js.close()


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("max_streams", -2, "jetstream.max_streams"),
        ("max_bytes", "lots", "jetstream.max_bytes"),
        ("enabled", "perhaps", "jetstream.enabled"),
        ("max_stream", 1, "jetstream.max_stream"),
    ],
)
def test_config_errors_name_the_key_and_value(
    tmp_path: pathlib.Path, key: str, value: object, words: str
) -> None:
    path = tmp_path / "jetmq.toml"
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    path.write_text(f"[jetstream]\n{key} = {shown}\n")
    with pytest.raises(ConfigError, match=words) as err:
        load_config(path)
    assert str(value) in str(err.value) or "unknown key" in str(err.value)

"""Configuration loading: defaults, the example file, and errors that name the key."""

from __future__ import annotations

import pathlib

import pytest

from broker.config import BrokerConfig, ConfigError, load_config

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_embedded_defaults() -> None:
    config = load_config(None)
    assert config.listener.addresses() == [("127.0.0.1", 1883)]
    assert config.storage.data_dir == "./jetmq-data"
    assert config.storage.sync == "always"


def test_example_file_equals_the_defaults() -> None:
    assert load_config(REPO / "etc" / "jetmq.toml") == BrokerConfig()


def test_overrides_apply_on_top_of_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "jetmq.toml"
    path.write_text('[storage]\nsync = "batch"\n')
    config = load_config(path, {"storage": {"data_dir": "/x"}, "listener": {"listen": ["[::1]:0"]}})
    assert config.storage.sync == "batch"
    assert config.storage.data_dir == "/x"
    assert config.listener.addresses() == [("::1", 0)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[mqtt]\nmaximum_qos = 3\n", "mqtt.maximum_qos (line 2)"),
        ("[mqtt]\n\nreceive_maximum = 0\n", "mqtt.receive_maximum (line 3)"),
        ("[storage]\nsync = 'sometimes'\n", "storage.sync (line 2)"),
        ("[listener]\nlisten = ['nohost']\n", "listener.listen (line 2)"),
        ("[mqtt]\nmax_qos = 1\n", "mqtt.max_qos (line 2): unknown key"),
        ("[nonsense]\n", "nonsense (line 1): unknown key"),
    ],
)
def test_errors_name_the_key_and_line(tmp_path: pathlib.Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value)


def test_invalid_toml_and_missing_file(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[mqtt\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.toml")


def test_a_bad_flag_is_named_by_the_flag_with_its_value() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            None,
            {"listener": {"listen": ["127.0.0.1:0", "nohost"]}},
            {("listener", "listen"): "--listen"},
        )
    assert str(info.value) == "--listen: 'nohost': expected HOST:PORT ([ADDRESS]:PORT for IPv6)"


def test_every_error_quotes_the_value(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[storage]\nsync = 'never'\n[mqtt]\nmax_packet_size = 10\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).splitlines() == [
        f"{path}: storage.sync (line 2): 'never': Input should be 'always' or 'batch'",
        f"{path}: mqtt.max_packet_size (line 4): 10: Input should be greater than or equal to 32",
    ]

"""The [bridge] section: keys, refusals naming the rule and why, and nats-py only when
asked for."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from broker.config import ConfigError, load_config

pytestmark = pytest.mark.timeout(60)


def _load(tmp_path: pathlib.Path, text: str) -> object:
    path = tmp_path / "jetmq.toml"
    path.write_text(text)
    return load_config(path)


def test_the_issue_example_loads(tmp_path: pathlib.Path) -> None:
    config = _load(
        tmp_path,
        """
[bridge]
servers = ["nats://127.0.0.1:4222"]
name = "edge-1"
subject_prefix = "edge"
user = "u"
password = "p"

[[bridge.forward]]
filter = "sensors/#"
mode = "jetstream"
min_qos = 0

[[bridge.import]]
subject = "cmd.>"
qos = 1
retain = false
stream = "CMD"
durable = "edge-1-cmd"
""",
    )
    bridge = config.bridge  # type: ignore[attr-defined]
    assert bridge.name == "edge-1"
    assert bridge.forward[0].mode == "jetstream"
    assert bridge.imports[0].durable == "edge-1-cmd"
    assert bridge.forward[0].subjects("edge") == ["edge.sensors.>", "edge.sensors"]


def test_an_overlap_that_could_loop_is_refused_naming_both_rules(tmp_path: pathlib.Path) -> None:
    text = """
[bridge]
name = "edge-1"
[[bridge.forward]]
filter = "sensors/+/temp"
[[bridge.import]]
subject = "sensors.kitchen.*"
"""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    msg = str(err.value)
    assert "bridge.forward[0]" in msg
    assert "bridge.import[0]" in msg
    assert "could loop" in msg
    assert "origin check cannot stop the loop" in msg
    # With a subject prefix the origin check covers it: accepted.
    _load(
        tmp_path,
        text.replace('name = "edge-1"', 'name = "edge-1"\nsubject_prefix = "e"').replace(
            "sensors.kitchen.*", "e.sensors.kitchen.*"
        ),
    )
    # Disjoint subjects: accepted.
    _load(tmp_path, text.replace("sensors.kitchen.*", "cmd.>"))
    # 'a/#' publishes on 'a' too.
    with pytest.raises(ConfigError, match="could loop"):
        _load(tmp_path, text.replace("sensors/+/temp", "cmd/#").replace("sensors.kitchen.*", "cmd"))


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ('name = "edge.1"', "bridge.name"),
        ('name = "e"\nservers = []', "at least one NATS URL"),
        ('name = "e"\nservers = ["127.0.0.1:4222"]', "is not a URL"),
        ('name = "e"\n[[bridge.forward]]\nfilter = "a/#/b"', "not a valid MQTT filter"),
        ('name = "e"\n[[bridge.forward]]\nfilter = "a b"', "cannot become a NATS subject"),
        (
            'name = "e"\n[[bridge.forward]]\nfilter = "a"\nmode = "push"',
            "bridge.forward[0].mode (line 5)",
        ),
        ('name = "e"\n[[bridge.import]]\nsubject = "a..b"', "not a valid NATS subject"),
        ('name = "e"\n[[bridge.import]]\nsubject = "a"\ndurable = "d"', "set stream too"),
        ('name = "e"\n[[bridge.import]]\nsubject = "a"\nqos = 3', "bridge.import[0].qos (line 5)"),
        ('name = "e"\nnats_url = "x"', "unknown key"),
        (
            'name = "e"\ncreds = "/nonexistent/x.creds"',
            "bridge.creds (line 3): '/nonexistent/x.creds': no such file",
        ),
        ('name = "e"\ntls_ca = "/nonexistent/ca.pem"', "no such file"),
    ],
)
def test_bad_values_are_named(tmp_path: pathlib.Path, snippet: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        _load(tmp_path, "[bridge]\n" + snippet + "\n")


def test_without_bridge_the_broker_never_imports_nats(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys, trio;"
        "from broker.config import load_config;"
        "from broker.net.runtime import Broker;"
        f"c = load_config(None, {{'storage': {{'data_dir': {str(tmp_path / 'd')!r}}}}});"
        "b = trio.run(Broker.open, c);"
        "trio.run(b.close);"
        "assert 'nats' not in sys.modules, 'nats imported';"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert out.stdout.strip() == "ok", out.stderr


def test_bridge_without_nats_py_is_a_config_error(tmp_path: pathlib.Path) -> None:
    """nats-py missing (hidden from the import system in a child process)."""
    conf = tmp_path / "jetmq.toml"
    conf.write_text('[bridge]\nname = "edge-1"\n')
    code = (
        "import sys;"
        "sys.modules['nats'] = None;"  # what Python does for a package that is not installed
        "import importlib.util;"
        "importlib.util.find_spec = lambda name, *a: None if name == 'nats' else _f(name, *a);"
        "from broker.cli import main;"
        f"sys.exit(main(['check-config', '--config', {str(conf)!r}]))"
    )
    code = "import importlib.util; _f = importlib.util.find_spec;" + code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert out.returncode == 1
    assert "needs nats-py, which is not installed" in out.stderr
    assert "jetmq[bridge]" in out.stderr


def test_only_the_link_imports_nats_py() -> None:
    import ast

    root = pathlib.Path(__file__).resolve().parents[2] / "broker"
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n == "nats" or n.startswith("nats.") for n in names):
                importers.add(path.relative_to(root).as_posix())
    assert importers == {"bridge/link.py"}


@pytest.mark.parametrize("name", ["edge-1.toml", "edge-2.toml"])
def test_the_scale_out_example_passes_check_config(name: str) -> None:
    path = pathlib.Path(__file__).resolve().parents[2] / "etc" / "scale-out" / name
    config = load_config(path)
    assert config.bridge is not None
    assert config.bridge.name == name.removesuffix(".toml")

"""``pip install .`` as an operator runs it: a wheel with the compiled radix extension, the
hot path compiled with mypyc and the status page's files, no dev dependencies, installed
into a fresh venv, serving a round trip from outside the source tree."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.broker.pahoclient import Paho

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNTIME = {"trio", "cffi", "lmdb", "pydantic", "h11", "prometheus-client", "wsproto", "anyio"}
IGNORE = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".*_cache", "jetmq-data"
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_wheel_installs_and_serves(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)  # a clean tree: no in-place build products
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("jetmq-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert any(n.startswith("radix/_radix") and n.endswith(".so") for n in names), names
    # The hot path compiled with mypyc (setup.py), the group's library and the stamp.
    assert "hotpath/native.stamp" in names
    assert any(n.startswith("hotpath/lib__mypyc") and n.endswith(".so") for n in names)
    assert any(n.startswith("broker/mqtt/decoder.") and n.endswith(".so") for n in names)
    assert "broker/ops/static/index.html" in names
    assert not any(n.startswith("tests/") for n in names)
    required = {
        line.split(":", 1)[1].strip().split(">")[0].split(";")[0].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert required == RUNTIME  # no dev dependency at run time

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import radix._radix as r, broker, hotpath, store.streams as s; "
            "print(r.__file__); print(broker.__file__); print(s.__file__); "
            "print(hotpath.state() == 'compiled')",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,  # not the source tree
    )
    *paths, compiled = where.stdout.split()
    for line in paths:
        assert line.startswith(str(venv)), where.stdout
    assert paths[-1].endswith(".so")
    assert compiled == "True"

    proc = subprocess.Popen(
        [
            str(venv / "bin" / "jetmq"),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line
        port = int(line.rsplit(":", 1)[1])
        sub, pub = Paho(port, "wheel-sub"), Paho(port, "wheel-pub")
        sub.connect()
        sub.subscribe("wheel/t", qos=1)
        pub.connect()
        pub.publish("wheel/t", b"from the wheel", qos=1)
        assert sub.get().payload == b"from the wheel"
        pub.disconnect()
        sub.disconnect()
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        proc.stdout.close()
    assert code == 0

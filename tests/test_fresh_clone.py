"""The README's first command on a fresh copy of the tree, as a new user runs it.

``./scripts/run`` in a copy of the tree with no ``.venv``: it creates the venv,
installs jetmq, builds the radix extension, compiles the hot path (mypyc) and starts
the broker, which says it runs compiled. The test waits
for its "listening on" line (never a sleep), makes a publish/subscribe round trip
with paho and stops it with SIGTERM, which must end it cleanly.

What is copied: ``git ls-files --cached --others --exclude-standard``, i.e. the
tree a commit of everything would hold (tracked files as they are on disk, plus
new files git does not ignore). Ignored local state (``.venv``, built ``*.so``,
``jetmq-data``, caches) is never copied, so a developer's machine passes or fails
this the way CI's fresh clone of that commit would; and the script being changed
is tested before it is committed, not only after. In CI (a clean clone) the copy
is exactly the checked-out commit.

pip may use its cache, so "fresh" means a new venv and a new build, not new
downloads. The install takes tens of seconds; everything is bounded by
``INSTALL_TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import threading
import time

import pytest

from tests.broker.pahoclient import Paho

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1300)]

REPO = pathlib.Path(__file__).resolve().parents[1]
# venv, pip install, radix build, the profile-guided mypyc build (~6 min), start
INSTALL_TIMEOUT = 1200.0
STOP_TIMEOUT = 30.0


def _copy_tree(dest: pathlib.Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    for raw in listed.split(b"\0"):
        if not raw:
            continue
        name = os.fsdecode(raw)
        src = REPO / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree: a commit would not hold it
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)  # keeps scripts executable


def _env() -> dict[str, str]:
    """The caller's environment without the traces of this test's own venv."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_scripts_run_on_a_fresh_copy_serves_a_round_trip(tmp_path: pathlib.Path) -> None:
    tree = tmp_path / "jetmq"
    _copy_tree(tree)
    assert (tree / "scripts" / "run").is_file()
    assert not (tree / ".venv").exists()

    proc = subprocess.Popen(
        ["./scripts/run", "--listen", "127.0.0.1:0"],
        cwd=tree,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: pip and the broker go together
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    output: list[str] = []
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stdout:
            output.append(line)
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        # Port 0: the kernel picks a free port and the broker prints it (no probe-then-bind race).
        port = 0
        deadline = time.monotonic() + INSTALL_TIMEOUT
        while not port:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "not listening within the timeout:\n" + "".join(output)
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, "scripts/run ended before listening:\n" + "".join(output)
            if "listening on" in line:
                port = int(line.rsplit(":", 1)[1])

        sub = Paho(port, "fresh-sub")
        pub = Paho(port, "fresh-pub")
        try:
            sub.connect()
            assert [rc.value for rc in sub.subscribe("fresh/clone", qos=1)] == [1]
            pub.connect()
            pub.publish("fresh/clone", b"round trip", qos=1)
            message = sub.get()
            assert (message.topic, message.payload) == ("fresh/clone", b"round trip")
        finally:
            pub.disconnect()
            sub.disconnect()

        proc.send_signal(signal.SIGTERM)  # scripts/run exec'd jetmq: this is the broker
        assert proc.wait(timeout=STOP_TIMEOUT) == 0, "".join(output)
        reader.join(timeout=STOP_TIMEOUT)
        assert "jetmq: SIGTERM, shutting down" in "".join(output)
        # scripts/run compiled the hot path (scripts/build_native.py) and the broker uses it.
        assert "hot path: compiled" in "".join(output)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
        reader.join(timeout=STOP_TIMEOUT)  # EOF once every process of the group is gone
        if not reader.is_alive():
            stdout.close()

"""A Spark standalone cluster on loopback for tests: one master and one worker started from
the installed pyspark's ``spark-class``, each a child process whose log is read until it
says it is ready (the master's URL, the worker's registration)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import threading
from typing import IO

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = "Successfully registered with master"


class StandaloneCluster:
    def __init__(self, work: pathlib.Path, cores: int = 2) -> None:
        self.work = work
        self.cores = cores
        self.url = ""
        self._procs: list[subprocess.Popen[str]] = []
        self.logs: list[list[str]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.work / "logs"),
            SPARK_WORKER_DIR=str(self.work / "worker"),
            PYSPARK_PYTHON=sys.executable,
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _spawn(self, *args: str) -> tuple[subprocess.Popen[str], list[str], threading.Event]:
        spark_class = pathlib.Path(sys.executable).parent / "spark-class"
        proc = subprocess.Popen(
            [str(spark_class), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self._env(),
            cwd=self.work,
        )
        self._procs.append(proc)
        lines: list[str] = []
        self.logs.append(lines)
        return proc, lines, threading.Event()

    @staticmethod
    def _follow(out: IO[str], lines: list[str], ready: threading.Event, want: str) -> None:
        for line in out:
            lines.append(line)
            if re.search(want, line):
                ready.set()
        ready.set()  # the process ended: whoever waits sees it has no URL / registration

    def _wait(
        self, proc: subprocess.Popen[str], lines: list[str], want: str, timeout: float
    ) -> None:
        ready = threading.Event()
        assert proc.stdout is not None
        threading.Thread(
            target=self._follow, args=(proc.stdout, lines, ready, want), daemon=True
        ).start()
        if not ready.wait(timeout) or not any(re.search(want, line) for line in lines):
            raise RuntimeError(f"spark process not ready ({want!r}):\n{''.join(lines[-30:])}")

    def start(self, timeout: float = 120.0) -> str:
        self.work.mkdir(parents=True, exist_ok=True)
        master, mlines, _ = self._spawn(
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
        )  # fmt: skip
        self._wait(master, mlines, _MASTER_URL.pattern, timeout)
        m = next(m for m in map(_MASTER_URL.search, mlines) if m)
        self.url = m.group(1)
        worker, wlines, _ = self._spawn(
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--webui-port", "0",
            "--cores", str(self.cores), "--memory", "1g", self.url,
        )  # fmt: skip
        self._wait(worker, wlines, _REGISTERED, timeout)
        return self.url

    def stop(self) -> None:
        for proc in reversed(self._procs):
            proc.terminate()
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

"""A SparkSession for the pipeline's jobs and tests, and the checks that say clearly what is
missing (pyspark, pyarrow, Java) before Spark fails obscurely.

Settings (spec/jetstream.md §4.5): Python workers run this interpreter
(``PYSPARK_PYTHON``: the default ``python3`` may lack pyarrow); the driver binds to
loopback unless told otherwise (``SPARK_LOCAL_IP``); the session time zone is UTC; the
filter pushdown of Python data sources is on (``pushFilters``, pyspark >= 4.1: the
source takes filters when also given option ``filterPushdown=true``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Any, Final

INSTALL_HINT: Final = "pip install 'jetmq[spark]'   (pyspark and pyarrow; Java 17+ is needed too)"


class MissingDependency(RuntimeError):
    """pyspark, pyarrow or Java is not there; the message says how to install it."""


def check_dependencies() -> None:
    """Raise :class:`MissingDependency` unless pyspark, pyarrow and Java 17+ are usable."""
    for mod in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(mod) is None:
            raise MissingDependency(f"{mod} is not installed; install it with: {INSTALL_HINT}")
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise MissingDependency(
            "Java is not installed (Spark needs Java 17 or newer): install a JDK, e.g."
            " 'apt-get install openjdk-17-jre-headless', or set JAVA_HOME"
        )
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise MissingDependency(f"Java at {java} does not run: {exc}") from exc
    text = out.stderr + out.stdout
    if out.returncode != 0:
        raise MissingDependency(f"Java at {java} does not run: {text.strip()[:200]}")
    major = _java_major(text)
    if major is not None and major < 17:
        raise MissingDependency(f"Spark needs Java 17 or newer; {java} is Java {major}")


def _java_major(version_text: str) -> int | None:
    """The major version from ``java -version`` output (``"17.0.15"`` -> 17, ``"1.8"`` -> 8)."""
    for token in version_text.replace('"', " ").split():
        head = token.split(".")[0]
        if head.isdigit() and "." in token:
            n = int(head)
            return int(token.split(".")[1]) if n == 1 else n
    return None


def prepare_environment() -> None:
    """Environment every Spark process of ours needs (set only when not set already)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def build_session(
    master: str = "local[*]",
    app_name: str = "jetmq-pipeline",
    *,
    shuffle_partitions: int | None = None,
    quiet: bool = False,
    extra: dict[str, str] | None = None,
) -> Any:
    """A SparkSession with the jetmq source registered. ``quiet`` turns off the console
    progress bar and lowers the log level to ERROR (tests)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    from pipeline.source import JetmqDataSource

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if quiet:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(JetmqDataSource)
    return spark

"""Fixtures for the pipeline tests: one SparkSession for the whole test session (local[2],
UI off, 2 shuffle partitions, UTC), stores in tmp dirs filled through ``store``'s public
API, and ``jetmq serve`` as a child process for the sink."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from store import Publish, Store
from tests.broker.harness import BrokerProcess

Headers = tuple[tuple[str, str], ...]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ.setdefault("TZ", "UTC")
    from pipeline.session import build_session

    session = build_session("local[2]", "jetmq-tests", shuffle_partitions=2, quiet=True)
    yield session
    session.stop()


def fill(
    st: Store,
    stream: str,
    subjects: Sequence[str],
    payloads: Sequence[bytes],
    headers: Sequence[Headers] | None = None,
    batch: int = 2000,
) -> None:
    """Publish ``subjects[i]``/``payloads[i]`` (with ``headers[i]``) into ``stream``,
    ``batch`` messages per store submission, and wait for all of them."""
    futs = []
    for i in range(0, len(subjects), batch):
        ops = [
            Publish(subjects[j], payloads[j], headers[j] if headers else (), stream)
            for j in range(i, min(len(subjects), i + batch))
        ]
        futs.append(st.submit(ops))
    for f in futs:
        for res in f.result(timeout=60):
            assert res is not None
            assert not isinstance(res, Exception), res


@pytest.fixture
def data_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: pathlib.Path) -> Iterator[Store]:
    st = Store.open(data_dir, sync="batch")
    yield st
    st.close()


@pytest.fixture
def broker_process(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "broker-data")
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.terminate()

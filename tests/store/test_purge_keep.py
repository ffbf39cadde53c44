"""A purge that keeps the newest matching messages: where the kept ones begin is found
from a snapshot by ``Store.purge_stream`` (on the caller's thread) or by the writer for a
``PurgeStream`` submitted without it; both purge the same messages, which brute force
predicts."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from store import PurgeResult, PurgeStream, Store
from store.subjects import subject_matches
from tests.store.conftest import FakeClock

SUBJECTS = ["s.a", "s.b", "t.x.1", "t.y.2", "t.x.3"]
CASES = [
    (filter_, keep)
    for filter_ in (None, ">", "s.a", "t.*.*", "t.x.*", "s.none")
    for keep in (0, 1, 7, 150, 390, 1000)
]


def _build(path: Path, gaps: bool = True) -> dict[int, str]:
    """400 messages over SUBJECTS with 60 deleted here and there (with ``gaps``; else the
    first 60): seq -> subject."""
    rng = random.Random(8)
    subjects = [rng.choice(SUBJECTS) for _ in range(400)]
    gone = rng.sample(range(1, 401), 60) if gaps else list(range(1, 61))
    with Store.open(path, clock=FakeClock()) as s:
        s.create_stream({"name": "S", "subjects": ["s.>", "t.>"]})
        for x in subjects:
            s.publish(x, b"p")
        for q in gone:
            s.delete_msg("S", q)
    return {q: x for q, x in enumerate(subjects, 1) if q not in gone}


def _kept(stored: dict[int, str], filter_: str | None, keep: int) -> list[int]:
    matching = [
        q for q, x in stored.items() if filter_ in (None, ">") or subject_matches(filter_, x)
    ]
    purged = set(matching[: max(0, len(matching) - keep)])
    if filter_ in (None, ">") and keep == 0:  # a purge of the whole stream
        purged = set(stored)
    return sorted(set(stored) - purged)


def _remaining(s: Store) -> list[int]:
    return [m.seq for m in s.iter_msgs("S")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("filter_", "keep"), CASES)
@pytest.mark.parametrize("gaps", [True, False])
def test_the_snapshot_and_the_writer_purge_what_brute_force_says(
    tmp_path: Path, filter_: str | None, keep: int, gaps: bool
) -> None:
    stored = _build(tmp_path / "built", gaps)
    expected = _kept(stored, filter_, keep)
    shutil.copytree(tmp_path / "built", tmp_path / "b")
    with Store.open(tmp_path / "built", clock=FakeClock()) as s:
        purged = s.purge_stream("S", filter=filter_, keep=keep)
        assert _remaining(s) == expected
        assert purged == len(stored) - len(expected)
    with Store.open(tmp_path / "b", clock=FakeClock()) as s:
        [res] = s.submit([PurgeStream("S", filter_, None, keep)]).result(timeout=30)
        assert res == PurgeResult(len(stored) - len(expected))
        assert _remaining(s) == expected


@pytest.mark.timeout(60)
def test_messages_stored_after_the_snapshot_are_kept(tmp_path: Path) -> None:
    stored = _build(tmp_path / "d")
    with Store.open(tmp_path / "d", clock=FakeClock()) as s:
        bound = s.keep_bound("S", "s.a", 5)
        later = [s.publish("s.a", b"later") for _ in range(3)]
        s.submit([PurgeStream("S", "s.a", None, 5, bound)]).result(timeout=30)
        kept = [q for q in _remaining(s) if q in stored and stored[q] == "s.a"]
        assert len(kept) == 5
        assert all(a is not None and a.seq in _remaining(s) for a in later)


@pytest.mark.timeout(60)
def test_a_bound_for_another_stream_is_not_used(tmp_path: Path) -> None:
    """A stream re-created under the same name since the snapshot has another sid: the
    writer finds the bound itself."""
    stored = _build(tmp_path / "d")
    with Store.open(tmp_path / "d", clock=FakeClock()) as s:
        bound = s.keep_bound("S", None, 10)
        assert bound is not None
        sid = bound[0]
        s.submit([PurgeStream("S", None, None, 10, (sid + 1, 1))]).result(timeout=30)
        assert _remaining(s) == _kept(stored, None, 10)

"""Scans of the per-subject index, shared by the writer (:mod:`store.streams`) and the
read path (:mod:`store.api`).

The ``subjects`` database is keyed ``sid · epoch · subject · 0x00 · seq`` (epoch =
``seq >> keys.EPOCH_SHIFT``; see the table in :mod:`store.keys`): inside one epoch a
subject's keys are adjacent and in sequence order, and epochs follow each other in
sequence order. A subject's record in ``subjcount`` holds its first and last stored seq,
so a scan visits only the epochs between the two, one ``set_range`` each. An epoch in
that range holding none of the subject's messages still costs its seek: scanning a sparse
subject costs about ``(last - first) / 256`` seeks plus one step per message found.

Every function takes a cursor on the ``subjects`` database of the caller's transaction
(write or read) and moves it; the stream's :func:`keys.sid_prefix` and the UTF-8 subject.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from store import keys

_SHIFT = keys.EPOCH_SHIFT


def seqs(cur: Any, sid_b: bytes, subject: bytes, lo: int, hi: int) -> Iterator[int]:
    """Stored seqs of one subject with ``lo <= seq <= hi``, ascending.

    ``lo``/``hi`` should lie within the subject's first and last stored seq (callers clamp
    them with its record), which bounds the epochs visited. The cursor must not be moved
    by anyone else while the iterator is in use.
    """
    epoch, end = lo >> _SHIFT, hi >> _SHIFT
    start = keys.u64(lo)
    while epoch <= end:
        prefix = keys.subject_epoch_prefix(sid_b, subject, epoch)
        n = len(prefix)
        if cur.set_range(prefix + start if start else prefix):
            for k in cur.iternext(keys=True, values=False):
                if k[:n] != prefix:
                    break
                seq = keys.subject_key_seq(k)
                if seq > hi:
                    return
                yield seq
        start = b""
        epoch += 1


def sweep(
    cur: Any,
    sid_b: bytes,
    subject_prefix: bytes,
    lo: int,
    hi: int,
    matches: Callable[[bytes], bool],
) -> list[int]:
    """Stored seqs in ``[lo, hi]`` whose subject starts with ``subject_prefix`` and
    ``matches``, ascending: one seek per epoch and a step over every key of the epoch under
    the prefix. Cheaper than :func:`seqs` per subject when many subjects each span many
    epochs sparsely (the per-subject scans would seek every epoch once per subject)."""
    out: list[int] = []
    for epoch in range(lo >> _SHIFT, (hi >> _SHIFT) + 1):
        prefix = keys.subject_sweep_prefix(sid_b, epoch, subject_prefix)
        n = len(prefix)
        if not cur.set_range(prefix):
            break
        found = []
        for k in cur.iternext(keys=True, values=False):
            if k[:n] != prefix:
                break
            seq = keys.subject_key_seq(k)
            if lo <= seq <= hi and matches(keys.subject_key_subject(k)):
                found.append(seq)
        found.sort()  # an epoch's keys are in subject order
        out.extend(found)
    return out


class Swept(NamedTuple):
    """What :func:`sweep_firsts` found."""

    firsts: dict[bytes, int]  # each ``firsts`` subject found: its first seq
    lists: dict[bytes, list[int]]  # each ``upto`` subject: its seqs met (all, when complete)
    # Other subjects met, while collecting them: their seqs as far as the pass went. A
    # subject with more than ``other_max`` keys is dropped.
    others: dict[bytes, list[int]]


def sweep_firsts(
    cur: Any,
    sid_b: bytes,
    lo: int,
    hi: int,
    firsts: set[bytes],
    upto: dict[bytes, int],
    other_max: int = 0,
    other_subjects: int = 0,
) -> Swept:
    """One pass over the index keys of the epochs from ``lo``'s to ``hi``'s (one seek):
    for each subject in ``firsts`` (UTF-8) its first stored message at or after ``lo``;
    for each subject in ``upto`` every stored message from ``lo`` up to the seq it maps to
    (ascending); and, when ``other_max`` is set, the seqs of up to ``other_subjects``
    other subjects with at most ``other_max`` keys each (a caller checks a list against
    the subject's record: it is complete when the counts agree). Stops once every
    ``firsts`` and ``upto`` subject is done.
    Callers pass lower bounds of first seqs: no ``firsts`` or ``upto`` subject has a stored
    message below ``lo``, so the first key of such a subject met is its first message."""
    found: dict[bytes, int] = {}
    lists: dict[bytes, list[int]] = {b: [] for b in upto}
    others: dict[bytes, list[int]] = {}
    left = set(firsts)
    left.update(upto)
    too_many: set[bytes] = set()
    end = keys.subject_sweep_prefix(sid_b, (hi >> _SHIFT) + 1, b"")
    subject_of, seq_of = keys.subject_key_subject, keys.subject_key_seq
    if not left or not cur.set_range(keys.subject_sweep_prefix(sid_b, lo >> _SHIFT, b"")):
        return Swept(found, lists, others)
    for k in cur.iternext(keys=True, values=False):
        if k >= end:
            break
        subj = subject_of(k)
        if subj in left:  # an epoch's keys of a subject are in seq order
            seq = seq_of(k)
            last = upto.get(subj)
            if last is None:
                found[subj] = seq
                left.discard(subj)
            else:
                lists[subj].append(seq)
                if seq >= last:
                    left.discard(subj)
            if not left:
                break
        elif other_max and subj not in too_many:
            seqs = others.get(subj)
            if seqs is None:
                if len(others) >= other_subjects or subj in lists or subj in found:
                    continue  # (the last two: subjects asked for, already done)
                seqs = others[subj] = []
            seqs.append(seq_of(k))
            if len(seqs) > other_max:
                del others[subj]
                too_many.add(subj)
    return Swept(found, lists, others)


def next_seq(cur: Any, sid_b: bytes, subject: bytes, after: int, last: int) -> int:
    """The subject's first stored seq in ``(after, last]``; 0 if none."""
    if after >= last:
        return 0
    for seq in seqs(cur, sid_b, subject, after + 1, last):
        return seq
    return 0


def prev_seq(cur: Any, sid_b: bytes, subject: bytes, before: int, first: int) -> int:
    """The subject's last stored seq in ``[first, before)``; 0 if none."""
    if before <= first:
        return 0
    epoch, stop = (before - 1) >> _SHIFT, first >> _SHIFT
    bound = keys.u64(before)
    while epoch >= stop:
        prefix = keys.subject_epoch_prefix(sid_b, subject, epoch)
        # Above everything of this subject in this epoch: its key at ``before`` (in the
        # first epoch visited), else the first key past the epoch's prefix.
        after_key = prefix + bound if bound else keys.subject_epoch_end(prefix)
        ok = cur.prev() if cur.set_range(after_key) else cur.last()
        if ok:
            k = cur.key()
            if k[: len(prefix)] == prefix:
                seq = keys.subject_key_seq(k)
                return seq if seq >= first else 0
        bound = b""
        epoch -= 1
    return 0


def record(cur: Any, sid: int, subject: str) -> tuple[int, int, int]:
    """``(count, first_seq, last_seq)`` of a subject from a cursor on ``subjcount``;
    zeros when the stream stores nothing on it."""
    raw = cur.get(keys.subjcount_key(sid, subject))
    return keys.unpack_subject_record(bytes(raw)) if raw else (0, 0, 0)


def records(
    cur: Any, sid: int, prefix: str = "", after: str = ""
) -> Iterator[tuple[str, int, int, int]]:
    """``(subject, count, first_seq, last_seq)`` of every subject of a stream starting with
    ``prefix``, in subject byte order, from a cursor on ``subjcount``; with ``after``, only
    the subjects after that one."""
    start = keys.sid_prefix(sid)
    p = start + prefix.encode()
    if not cur.set_range(max(p, start + after.encode())):
        return
    for k, v in cur.iternext():
        if not k.startswith(p):
            return
        subject = keys.subjcount_subject(k)
        if subject != after:
            yield (subject, *keys.unpack_subject_record(bytes(v)))

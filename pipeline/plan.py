"""Planning reads: which streams, which sequence ranges, and streaming offsets.

Pure functions over :class:`pipeline.storeread.StreamMeta` snapshots (no Spark, no
LMDB), so the rules are tested directly. Offsets are ``{"<stream>": <last seq
included>}``: a flat JSON object of ints, what Spark writes into its checkpoint.

Rules (spec/jetstream.md §4.3):
- a stream's start offset is ``first_seq - 1`` (earliest), ``last_seq`` (latest) or
  the user's ``{"S": seq}`` minus one;
- a stream that appears after the query started (no entry in the start offset) starts
  at its ``first_seq - 1``; a deleted stream leaves the offset map;
- an offset never moves back: a stream whose ``last_seq`` is below the offset (purged
  and re-created under the same name) yields nothing until it passes the offset
  (documented in docs/pipeline.md);
- ``maxRecordsPerTrigger`` caps the total advance, given out to streams in name order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pipeline.options import MAX_SEQ, SeqBound, SourceOptions
from pipeline.storeread import SourceError, StreamMeta, is_user_stream

Offsets = dict[str, int]


@dataclass(frozen=True)
class Range:
    """Sequences ``first..last`` (inclusive) of one stream, as one Spark partition."""

    stream: str
    sid: int
    first: int
    last: int


def select(
    metas: Mapping[str, StreamMeta],
    opts: SourceOptions,
    only: frozenset[str] | None = None,
    *,
    strict: bool = True,
) -> list[StreamMeta]:
    """The streams to read, in name order. Named streams must exist when ``strict``."""
    if opts.streams is not None:
        missing = [s for s in opts.streams if s not in metas]
        if missing and strict:
            have = ", ".join(sorted(metas)) or "none"
            raise SourceError(
                f"jetmq source: stream {missing[0]!r} does not exist in {opts.url or opts.path!r}"
                f" (streams there: {have})"
            )
        names: Iterable[str] = (s for s in opts.streams if s in metas)
    else:
        names = (s for s in metas if is_user_stream(s))
    chosen = sorted(set(names))
    if only is not None:
        chosen = [s for s in chosen if s in only]
    return [metas[s] for s in chosen]


def _start_of(meta: StreamMeta, bound: SeqBound) -> int:
    """The offset (last seq already read) a stream starts from."""
    if bound.kind == "latest":
        return meta.last_seq
    if bound.kind == "map":
        seq = bound.for_stream(meta.name)
        if seq is not None:
            return max(seq - 1, 0)
    return max(meta.first_seq - 1, 0)


def initial_offsets(streams: Iterable[StreamMeta], bound: SeqBound) -> Offsets:
    return {m.name: _start_of(m, bound) for m in streams}


def latest_offsets(
    start: Mapping[str, int],
    streams: Iterable[StreamMeta],
    max_rows: int | None,
    cap: Mapping[str, int] | None = None,
) -> Offsets:
    """The end offset of the next micro-batch.

    ``cap`` (the availableNow snapshot) bounds each stream's end; streams absent from it
    were created after the snapshot and do not advance."""
    end: Offsets = {}
    budget = max_rows
    for m in streams:
        base = start.get(m.name)
        if base is None:
            base = max(m.first_seq - 1, 0)
        target = min(m.last_seq, MAX_SEQ)
        if cap is not None:
            target = min(target, cap.get(m.name, base))
        target = max(target, base)
        if budget is not None:
            step = min(target - base, budget)
            budget -= step
            target = base + step
        end[m.name] = target
    return end


def ranges(
    start: Mapping[str, int],
    end: Mapping[str, int],
    metas: Mapping[str, StreamMeta],
    partition_records: int,
    seq_min: int = 0,
    seq_max: int | None = None,
) -> list[Range]:
    """Partitions for ``(start[s], end[s]]`` of every stream in ``end`` that still exists,
    ``partition_records`` sequences each, narrowed to ``seq_min..seq_max``."""
    out: list[Range] = []
    for name in sorted(end):
        meta = metas.get(name)
        if meta is None:
            continue
        lo = max(start.get(name, max(meta.first_seq - 1, 0)) + 1, seq_min, 1)
        hi = end[name] if seq_max is None else min(end[name], seq_max)
        seq = lo
        while seq <= hi:
            last = min(seq + partition_records - 1, hi)
            out.append(Range(name, meta.sid, seq, last))
            seq = last + 1
    return out


def batch_bounds(streams: Iterable[StreamMeta], opts: SourceOptions) -> tuple[Offsets, Offsets]:
    """Batch reads: the start offsets (``startingSequence``) and the inclusive ends
    (``endingSequence``), evaluated once when the query is planned."""
    chosen = list(streams)
    start = initial_offsets(chosen, opts.starting)
    end: Offsets = {}
    for m in chosen:
        hi = m.last_seq
        if opts.ending.kind == "map":
            seq = opts.ending.for_stream(m.name)
            if seq is not None:
                hi = min(hi, seq)
        end[m.name] = min(hi, MAX_SEQ)
    return start, end

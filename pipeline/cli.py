"""``jetmq pipeline …``: the pipeline jobs from the command line.

``main(argv)`` takes the arguments after ``pipeline`` and returns the exit status:
0 done, 1 the job failed (the message says why), 2 bad usage or pyspark / pyarrow / Java
missing (with the install command). Spark prints its progress as it always does.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from pipeline.jobs import archive, rollup


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jetmq pipeline",
        description="Spark jobs over jetmq's stored streams (pyspark: pip install 'jetmq[spark]').",
    )
    sub = p.add_subparsers(dest="job", metavar="JOB", required=True)
    archive.add_arguments(
        sub.add_parser("archive", help="append a stream's new messages to Parquet (incremental)")
    )
    rollup.add_arguments(
        sub.add_parser("rollup", help="count/min/max/avg per topic and window of JSON payloads")
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: --help is 0, bad usage 2
        return int(exc.code or 0)
    from pipeline.session import MissingDependency, check_dependencies

    try:
        check_dependencies()
    except MissingDependency as exc:
        print(f"jetmq pipeline: {exc}", file=sys.stderr)
        return 2
    if args.job == "rollup":
        try:
            rollup.window_duration(args.window)
            if args.follow:
                rollup.window_duration(args.watermark or args.window)
                rollup.window_duration(args.trigger)
        except ValueError as exc:
            print(f"jetmq pipeline rollup: {exc}", file=sys.stderr)
            return 2
    problem = _check_stream(args)
    if problem is not None:  # said before a JVM starts, in one line
        print(f"jetmq pipeline {args.job}: {problem}", file=sys.stderr)
        return 1
    from pipeline.session import build_session

    spark = build_session(args.master, f"jetmq-pipeline-{args.job}")
    try:
        if args.job == "archive":
            r = archive.run(spark, args)
            print(
                f"archived {r['rows']} messages of {args.stream} to {args.to}"
                f" in {r['batches']} micro-batches; {r['skipped']} sequences skipped"
                " (removed by retention before they were read)"
            )
        elif args.follow:
            _follow(spark, args)
        else:
            r = rollup.run(spark, args)
            print(
                f"rolled up {r['new']} new messages of {args.stream}, changing {r['touched']}"
                f" windows; {args.to} holds {r['windows']} windows of {r['messages']} messages;"
                f" {r['corrupt']} payloads did not parse (see {args.to}/_corrupt)"
            )
    except Exception as exc:  # the job's failure, reported in one line, not a traceback
        print(f"jetmq pipeline {args.job}: {_first_line(exc)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


def _follow(spark: Any, args: argparse.Namespace) -> None:
    """Run the ``--follow`` queries until one fails or SIGINT/SIGTERM; a line per
    micro-batch: messages read, and the late data the watermark dropped so far."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    queries = rollup.follow(spark, args)
    seen = -1
    late = 0  # late data, as Spark counts it (after its partial aggregation)
    try:
        while not stop.is_set():
            if any(q.awaitTermination(0.5) for q in queries):
                break
            p = queries[0].lastProgress
            if p is not None and p.get("batchId", -1) != seen:
                seen = p["batchId"]
                late += rollup.late_groups([p])
                print(
                    f"rollup {args.stream}: batch {seen}, {p.get('numInputRows', 0)} messages;"
                    f" late data dropped so far: {late} (Spark's count, after partial aggregation)",
                    flush=True,
                )
    finally:
        for q in queries:
            q.stop()
    for q in queries:
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))


def _check_stream(args: argparse.Namespace) -> str | None:
    from pipeline.netread import NetReadError
    from pipeline.storeread import SourceError

    try:
        metas = rollup.source_streams(args)
    except (SourceError, NetReadError) as exc:
        return str(exc).removeprefix("jetmq source: ")
    if args.stream not in metas:
        have = ", ".join(sorted(metas)) or "none"
        where = args.url if args.url and (args.job == "archive" or args.via_broker) else args.path
        return f"stream {args.stream!r} does not exist in {where!r} (streams there: {have})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for marker in ("SourceError: ", "OptionError: ", "ValueError: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return text.splitlines()[0] if text else type(exc).__name__

"""``jetmq pipeline rollup``: per topic and time window, count/min/max/avg of the numeric
fields of JSON payloads.

A run is incremental: it reads only what the stream stored since the last run (the offset
kept in ``DIR/_rollup``, rollstate.py), aggregates it per topic and window into partial
aggregates (count, sum, min, max per field), merges them into the windows earlier runs
made, and rewrites ``DIR``'s Parquet windows (``topic, window_start, window_end,
messages, corrupt`` and ``<field>_min/_max/_avg`` per numeric field of ``--schema``):
every window is in ``DIR``, and only the windows new data touched changed. A window keeps
what it counted even after retention removed its messages from the stream. Payloads that
do not parse are counted (``corrupt``) and kept, as Spark's JSON reader does, in a
``_corrupt`` column: ``DIR/_corrupt/gen=<run>`` holds ``stream, seq, topic, ts, _corrupt``.
``--publish TOPIC`` publishes the windows a run touched as JSON to ``TOPIC`` through the
broker at ``--url`` (the ``jetmq`` sink). ``--rebuild`` starts over.

``--follow`` is the streaming form (``follow``): a query that runs until stopped, with a
watermark of ``--watermark`` (default: the window), appending each window to ``DIR`` once
the watermark passes its end; rows older than the watermark are dropped by Spark and
counted as Spark counts them (after its partial aggregation: late messages aggregated
together count once; the progress lines say so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import replace
from typing import Any, Final

from pipeline.jobs.rollstate import RollupState, StateDir, StateError
from pipeline.jobs.tlsflags import add_tls_flags, tls_options

NUMERIC: Final = ("byte", "short", "integer", "long", "float", "double", "decimal")
_WINDOW = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_UNITS: Final = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", required=True, help="stream to roll up")
    p.add_argument(
        "--schema",
        required=True,
        metavar="DDL",
        help='DDL of the JSON payload, e.g. "temp double, hum int, unit string"',
    )
    p.add_argument("--window", default="1m", help="window length: 30s, 1m, 5m, 1h (default 1m)")
    p.add_argument("--to", required=True, metavar="DIR", help="Parquet output directory")
    p.add_argument("--path", default="./jetmq-data", metavar="DATA_DIR")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--publish", default=None, metavar="TOPIC", help="also publish each window")
    p.add_argument(
        "--url", default="mqtt://127.0.0.1:1883", help="broker for --publish (mqtt://host:port)"
    )
    add_tls_flags(p)
    p.add_argument(
        "--via-broker",
        action="store_true",
        help="read through the broker at --url instead of --path (any executor host)",
    )
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="forget earlier runs and roll up everything the stream holds now",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep running: emit each window once the watermark passes it (until stopped)",
    )
    p.add_argument(
        "--watermark",
        default=None,
        help="--follow: how late a message may be (default: the window length)",
    )
    p.add_argument("--trigger", default="10s", help="--follow: micro-batch interval (default 10s)")


def window_duration(text: str) -> str:
    """``"1m"`` -> ``"1 minutes"`` (Spark's interval words); ValueError for anything else."""
    m = _WINDOW.match(text)
    if m is None or int(m.group(1)) == 0:
        raise ValueError(f"--window {text!r}: use a number and a unit, e.g. 30s, 1m, 5m, 1h")
    return f"{int(m.group(1))} {_UNITS[m.group(2)]}"


def parse_schema(ddl: str) -> Any:
    """The payload StructType (with ``_corrupt string`` added) and its numeric fields."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    try:
        st = _parse_datatype_string(ddl)
    except Exception as exc:
        raise ValueError(f"--schema {ddl!r} is not a Spark DDL schema: {exc}") from None
    if not isinstance(st, StructType) or not st.fields:
        raise ValueError(f"--schema {ddl!r}: give fields, e.g. 'temp double, hum int'")
    from pyspark.sql.types import StringType

    numeric = [f.name for f in st.fields if f.dataType.typeName() in NUMERIC]
    if not numeric:
        raise ValueError(f"--schema {ddl!r} has no numeric field to roll up")
    full = StructType([*st.fields, StructField("_corrupt", StringType())])
    return full, numeric


def _parsed(args: argparse.Namespace, schema: Any, reader: Any) -> Any:
    """The stream's rows with the payload parsed under ``schema`` (``_corrupt`` set when it
    does not parse)."""
    from pyspark.sql import functions as F

    reader = reader.format("jetmq").option("streams", args.stream)
    if args.via_broker:
        reader = reader.option("url", args.url).options(**tls_options(args))
    else:
        reader = reader.option("path", os.path.abspath(args.path))
    raw = reader.option("includeHeaders", "false").load()
    return raw.select(
        "stream",
        "seq",
        "topic",
        "ts",
        F.from_json(
            F.col("payload").cast("string"),
            schema,
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"},
        ).alias("j"),
    ).select("stream", "seq", "topic", "ts", "j.*")


def _partials(parsed: Any, duration: str, numeric: list[str]) -> Any:
    """Per topic and window, the parts windows are merged from: ``messages``, ``corrupt``,
    and per numeric field ``_n`` (values present), ``_sum``, ``_min``, ``_max``."""
    from pyspark.sql import functions as F

    bad = F.col("_corrupt").isNotNull()
    aggs = [
        F.sum(F.when(bad, 0).otherwise(1)).alias("messages"),
        F.sum(F.when(bad, 1).otherwise(0)).alias("corrupt"),
    ]
    for name in numeric:
        good = F.when(~bad, F.col(name))
        aggs += [
            F.count(good).alias(f"{name}_n"),
            F.sum(good).alias(f"{name}_sum"),
            F.min(good).alias(f"{name}_min"),
            F.max(good).alias(f"{name}_max"),
        ]
    return (
        parsed.groupBy("topic", F.window("ts", duration).alias("w"))
        .agg(*aggs)
        .select(
            "topic",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "messages",
            "corrupt",
            *[f"{n}_{p}" for n in numeric for p in ("n", "sum", "min", "max")],
        )
    )


def _merge(old: Any, new: Any, numeric: list[str]) -> Any:
    """``old`` and ``new`` partials combined window by window."""
    from pyspark.sql import functions as F

    key = ["topic", "window_start", "window_end"]
    a, b = old.alias("a"), new.alias("b")
    j = a.join(b, on=key, how="full_outer")

    def add(c: str) -> Any:
        return (
            F.coalesce(F.col(f"a.{c}"), F.lit(0)) + F.coalesce(F.col(f"b.{c}"), F.lit(0))
        ).alias(c)

    cols = [*key, add("messages"), add("corrupt")]
    for n in numeric:
        cols += [
            add(f"{n}_n"),
            # sum of absent parts is absent (null), as a sum over no values is
            (
                F.when(
                    F.col(f"a.{n}_sum").isNull() & F.col(f"b.{n}_sum").isNull(), F.lit(None)
                ).otherwise(
                    F.coalesce(F.col(f"a.{n}_sum"), F.lit(0))
                    + F.coalesce(F.col(f"b.{n}_sum"), F.lit(0))
                )
            ).alias(f"{n}_sum"),
            F.least(F.col(f"a.{n}_min"), F.col(f"b.{n}_min")).alias(f"{n}_min"),
            F.greatest(F.col(f"a.{n}_max"), F.col(f"b.{n}_max")).alias(f"{n}_max"),
        ]
    return j.select(*cols)


def _windows(partials: Any, numeric: list[str]) -> Any:
    """The output rows: ``messages``, ``corrupt`` and ``<f>_min/_max/_avg``."""
    from pyspark.sql import functions as F

    cols = ["topic", "window_start", "window_end", "messages", "corrupt"]
    out = [F.col(c) for c in cols]
    for n in numeric:
        out += [
            F.col(f"{n}_min"),
            F.col(f"{n}_max"),
            F.when(F.col(f"{n}_n") > 0, F.col(f"{n}_sum") / F.col(f"{n}_n")).alias(f"{n}_avg"),
        ]
    return partials.select(*out).orderBy("topic", "window_start")


def run(spark: Any, args: argparse.Namespace) -> dict[str, int]:
    """One incremental run: roll up what the stream stored since the last run into the
    windows it touched, publish those windows when asked, and rewrite ``DIR``'s windows.

    Returns ``{"windows": all windows, "messages": m, "corrupt": c, "new": rows read this
    run, "touched": windows this run changed}``."""
    from pyspark.sql import functions as F

    duration = window_duration(args.window)
    schema, numeric = parse_schema(args.schema)
    out = os.path.abspath(args.to)
    sd = StateDir(out)
    with sd.locked():
        metas = source_streams(args)
        meta = metas.get(args.stream)
        if meta is None:
            where = args.url if args.via_broker else args.path
            raise ValueError(f"stream {args.stream!r} does not exist in {where!r}")
        state = None if getattr(args, "rebuild", False) else sd.load()
        if os.path.exists(os.path.join(out, "_checkpoint")):
            raise StateError(f"{out!r} holds a --follow roll-up; give batch runs another --to")
        if state is not None:
            _check_compatible(state, meta.sid, args, out)
        else:
            sd.reset()
            state = RollupState(args.stream, meta.sid, args.window, args.schema)
            sd.save(state)
        if state.published < state.gen:  # a run died between its state and its windows
            _publish_windows(spark, sd, state, numeric)
            state = replace(state, published=state.gen)
            sd.save(state)
        new_rows = touched = 0
        if meta.last_seq > state.offset:
            reader = spark.read.option(
                "startingSequence", json.dumps({args.stream: state.offset + 1})
            ).option("endingSequence", json.dumps({args.stream: meta.last_seq}))
            parsed = _parsed(args, schema, reader).cache()
            try:
                new_rows = parsed.count()
                fresh = _partials(parsed, duration, numeric).cache()
                touched = fresh.count()
                nxt = state.advance(meta.last_seq)
                if state.gen:
                    merged = _merge(spark.read.parquet(sd.partials(state.gen)), fresh, numeric)
                else:
                    merged = fresh
                merged.write.mode("overwrite").parquet(sd.partials(nxt.gen))
                bad = parsed.filter(F.col("_corrupt").isNotNull())
                bad.select("stream", "seq", "topic", "ts", "_corrupt").write.mode(
                    "overwrite"
                ).parquet(sd.corrupt(nxt.gen))
                sd.save(nxt)
                _publish_windows(spark, sd, nxt, numeric)
                state = replace(nxt, published=nxt.gen)
                sd.save(state)
                sd.drop_partials_except(state.gen)
                if args.publish and touched:
                    touched_windows = _windows(
                        spark.read.parquet(sd.partials(state.gen)).join(
                            fresh.select("topic", "window_start", "window_end"),
                            on=["topic", "window_start", "window_end"],
                            how="left_semi",
                        ),
                        numeric,
                    )
                    _publish_rows(touched_windows, args)
                fresh.unpersist()
            finally:
                parsed.unpersist()
        totals = _totals(spark, sd, state)
    return {**totals, "new": int(new_rows), "touched": int(touched)}


def source_streams(args: argparse.Namespace) -> dict[str, Any]:
    """The streams where the job reads: through the broker, or in the data directory."""
    from pipeline import storeread

    if getattr(args, "via_broker", False) or (args.job == "archive" and args.url):
        from pipeline import netread
        from pipeline.mqttpub import parse_url

        return netread.stream_metas(parse_url(args.url, tls_options(args)))
    try:
        return storeread.list_streams(os.path.abspath(args.path))
    finally:  # the driver keeps no environment open (a broker may open the store here)
        storeread.close_all()


def _check_compatible(state: RollupState, sid: int, args: argparse.Namespace, out: str) -> None:
    what = []
    if state.stream != args.stream or state.sid != sid:
        same = state.stream == args.stream
        what.append(
            f"stream {args.stream!r} was deleted and re-created since"
            if same
            else f"stream {state.stream!r}, not {args.stream!r}"
        )
    if state.window != args.window:
        what.append(f"window {state.window!r}, not {args.window!r}")
    if state.schema != args.schema:
        what.append(f"schema {state.schema!r}, not {args.schema!r}")
    if what:
        raise StateError(
            f"{out!r} holds a roll-up of {'; '.join(what)}: use another --to, or --rebuild"
            " to recompute it from what the stream holds now"
        )


def _publish_windows(spark: Any, sd: StateDir, state: RollupState, numeric: list[str]) -> None:
    _windows(spark.read.parquet(sd.partials(state.gen)), numeric).write.mode("overwrite").parquet(
        sd.staging
    )
    sd.swap_in_staging()


def _publish_rows(windows: Any, args: argparse.Namespace) -> None:
    from pyspark.sql import functions as F

    (
        windows.select(
            F.lit(args.publish).alias("topic"),
            F.to_json(F.struct(*windows.columns)).alias("payload"),
        )
        .write.format("jetmq")
        .mode("append")
        .option("url", args.url)
        .options(**tls_options(args))
        .save()
    )


def _totals(spark: Any, sd: StateDir, state: RollupState) -> dict[str, int]:
    from pyspark.sql import functions as F

    if state.gen == 0:
        return {"windows": 0, "messages": 0, "corrupt": 0}
    t = (
        spark.read.parquet(sd.partials(state.gen))
        .agg(
            F.count(F.lit(1)).alias("w"), F.sum("messages").alias("m"), F.sum("corrupt").alias("c")
        )
        .first()
    )
    return {"windows": int(t.w or 0), "messages": int(t.m or 0), "corrupt": int(t.c or 0)}


def follow(spark: Any, args: argparse.Namespace) -> list[Any]:
    """Start the ``--follow`` queries (the windows into ``DIR`` first, the payloads that do
    not parse into ``DIR/_corrupt``; with ``--publish`` the windows to the broker too) and
    return them running; the caller waits and stops them."""
    from pyspark.sql import functions as F

    duration = window_duration(args.window)
    watermark = window_duration(args.watermark or args.window)
    trigger = window_duration(args.trigger)
    schema, numeric = parse_schema(args.schema)
    out = os.path.abspath(args.to)
    if os.path.exists(os.path.join(out, "_rollup", "state.json")):
        raise StateError(f"{out!r} holds batch roll-ups; give --follow another --to")
    parsed = _parsed(args, schema, spark.readStream)
    bad = F.col("_corrupt").isNotNull()
    aggs = [
        F.sum(F.when(bad, 0).otherwise(1)).alias("messages"),
        F.sum(F.when(bad, 1).otherwise(0)).alias("corrupt"),
    ]
    for name in numeric:
        good = F.when(~bad, F.col(name))
        aggs += [
            F.min(good).alias(f"{name}_min"),
            F.max(good).alias(f"{name}_max"),
            F.avg(good).alias(f"{name}_avg"),
        ]
    windows = (
        parsed.withWatermark("ts", watermark)
        .groupBy("topic", F.window("ts", duration).alias("w"))
        .agg(*aggs)
        .select(
            "topic",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "messages",
            "corrupt",
            *[f"{n}_{s}" for n in numeric for s in ("min", "max", "avg")],
        )
    )
    queries = [
        windows.writeStream.outputMode("append")
        .format("parquet")
        .option("path", out)
        .option("checkpointLocation", os.path.join(out, "_checkpoint"))
        .trigger(processingTime=trigger)
        .queryName(f"jetmq-rollup-{args.stream}")
        .start()
    ]
    # The payloads that did not parse, as the batch runs keep them (DIR/_corrupt), appended
    # by a query of their own (a file sink per path: the windows' sink owns DIR).
    queries.append(
        parsed.filter(bad)
        .select("stream", "seq", "topic", "ts", "_corrupt")
        .writeStream.outputMode("append")
        .format("parquet")
        .option("path", os.path.join(out, "_corrupt"))
        .option("checkpointLocation", os.path.join(out, "_checkpoint_corrupt"))
        .trigger(processingTime=trigger)
        .queryName(f"jetmq-rollup-{args.stream}-corrupt")
        .start()
    )
    if args.publish:
        queries.append(
            windows.select(
                F.lit(args.publish).alias("topic"),
                F.to_json(F.struct(*windows.columns)).alias("payload"),
            )
            .writeStream.outputMode("append")
            .format("jetmq")
            .option("url", args.url)
            .options(**tls_options(args))
            .option("checkpointLocation", os.path.join(out, "_checkpoint_publish"))
            .trigger(processingTime=trigger)
            .start()
        )
    return queries


def late_groups(progress: list[dict[str, Any]]) -> int:
    """Late data the watermark dropped over a query's progress reports, as Spark counts it
    (``numRowsDroppedByWatermark``): rows after its partial aggregation, so late messages
    of one micro-batch that were aggregated together count once; non-zero whenever late
    data was dropped."""
    return sum(
        int(op.get("numRowsDroppedByWatermark", 0))
        for p in progress
        for op in p.get("stateOperators", ())
    )

#!/usr/bin/env python3
"""Benchmark of the radix topic index against the pure-Python dict trie, in one run.

    .venv/bin/python scripts/bench_radix.py [--pubs N] [--repeats R] [--retained N]

The workload generator and the dict trie live in ../shared/bench/radix/ (relative
to the repository); workload files are generated into a temporary directory at
run time and never kept. Every rate is the median over the repeats, and every
comparison is made against the baseline measured in the same process (matching:
baseline and radix interleaved in every repeat; ratios are medians of per-repeat ratios).
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
BENCH = (REPO / ".." / "shared" / "bench" / "radix").resolve()
sys.path.insert(0, str(REPO))

import radix  # noqa: E402
from radix._radix import ffi, lib  # noqa: E402


def median_rate(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    """(median operations per second, operations per run) of fn() -> ops."""
    rates = []
    ops = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        ops = fn()
        rates.append(ops / (time.perf_counter() - t0))
    return statistics.median(rates), ops


def load(tmp: pathlib.Path, mode: str) -> tuple[list[tuple[str, int]], list[str]]:
    subprocess.run(
        [sys.executable, str(BENCH / "gen_workload.py"), "100000", mode],
        cwd=tmp,
        check=True,
        capture_output=True,
        timeout=300,
    )
    subs = []
    for line in (tmp / f"subs_{mode}.tsv").read_text(encoding="utf-8").splitlines():
        f, c = line.split("\t")
        subs.append((f, int(c)))
    pubs = (tmp / f"pubs_{mode}.txt").read_text(encoding="utf-8").splitlines()
    return subs, pubs


def bench_mode(
    tmp: pathlib.Path, mode: str, npubs: int, repeats: int, pytrie: Any
) -> dict[str, float]:
    subs, pubs_all = load(tmp, mode)
    pubs = pubs_all[:npubs]
    bsubs = [(f.encode(), c) for f, c in subs]
    bpubs = [p.encode() for p in pubs]
    r: dict[str, float] = {}

    def trie_insert() -> int:
        t = pytrie.Trie()
        for f, c in subs:
            t.insert(f, c)
        return len(subs)

    r["trie_insert"], _ = median_rate(trie_insert, repeats)
    trie = pytrie.Trie()
    for f, c in subs:
        trie.insert(f, c)

    def c_insert(inversion: bool) -> Callable[[], int]:
        def run() -> int:
            with radix.TopicIndex(seed=1, inversion=inversion) as idx:
                for i, (f, c) in enumerate(bsubs):
                    idx.subscribe(f, c, i)
            return len(bsubs)

        return run

    r["c_insert"], _ = median_rate(c_insert(False), repeats)
    r["c_insert_inv"], _ = median_rate(c_insert(True), repeats)
    with radix.TopicIndex(seed=1, inversion=False) as plain:
        for i, (bf, c) in enumerate(bsubs):
            plain.subscribe(bf, c, i)
        r["bytes_per_sub"] = plain.bytes_used / plain.subscriptions
        r["filters"] = plain.filters
    idx = radix.TopicIndex(seed=1)
    for i, (bf, c) in enumerate(bsubs):
        idx.subscribe(bf, c, i)
    r["bytes_per_sub_inv"] = idx.bytes_used / idx.subscriptions

    tmatch = trie.match

    def trie_match() -> int:
        for p in pubs:
            tmatch(p)
        return len(pubs)

    cmatch = idx.match

    def c_match_list() -> int:
        for p in bpubs:
            cmatch(p)
        return len(bpubs)

    fanout = sum(len(idx.match(p)) for p in bpubs) / len(bpubs)
    r["fanout"] = fanout

    rt, m = idx._rt, idx._m
    cap = 1 << 16
    out = ffi.new("uint64_t[]", cap)
    n = ffi.new("size_t *")
    call = lib.radix_match

    def c_match_call() -> int:
        for p in bpubs:
            call(rt, m, p, len(p), 0, out, cap, n)
        return len(bpubs)

    # Interleave baseline and contenders in every repeat, so load from other
    # processes hits both sides; ratios are medians of per-repeat ratios.
    rates: dict[str, list[float]] = {"trie": [], "list": [], "call": []}
    for _ in range(repeats):
        for name, fn in (("trie", trie_match), ("list", c_match_list), ("call", c_match_call)):
            t0 = time.perf_counter()
            ops = fn()
            rates[name].append(ops / (time.perf_counter() - t0))
    r["trie_match"] = statistics.median(rates["trie"])
    r["c_match_list"] = statistics.median(rates["list"])
    r["c_match_call"] = statistics.median(rates["call"])
    r["ratio_list"] = statistics.median(
        lc / tr for lc, tr in zip(rates["list"], rates["trie"], strict=True)
    )
    r["ratio_call"] = statistics.median(
        cc / tr for cc, tr in zip(rates["call"], rates["trie"], strict=True)
    )

    dmatch = idx.match_detailed

    def c_match_detailed() -> int:
        for p in bpubs:
            for _client, _handle, _group in dmatch(p):
                pass
        return len(bpubs)

    r["c_match_detailed"], _ = median_rate(c_match_detailed, max(1, repeats // 2))

    before = idx.match_allocations
    c_match_list()
    c_match_call()
    r["allocs_per_match"] = (idx.match_allocations - before) / (2 * len(bpubs))
    idx.close()
    return r


def bench_retained(count: int, repeats: int) -> dict[str, Any]:
    regions = [f"r{i}" for i in range(10)]
    sites = [f"site{i}" for i in range(50)]
    devs = [f"dev{i}" for i in range(200)]
    sens = ["temp", "hum", "co2", "pm25", "volt", "amp", "rssi", "door", "lux", "pres"]
    topics: list[bytes] = []
    for a in regions:
        for b in sites:
            for c in devs:
                for d in sens:
                    topics.append(f"{a}/{b}/{c}/{d}".encode())
                    if len(topics) >= count:
                        break
    topics = topics[:count]
    ret = radix.RetainedIndex()
    t0 = time.perf_counter()
    for i, t in enumerate(topics):
        ret.set(t, i)
    insert_rate = len(topics) / (time.perf_counter() - t0)
    res: dict[str, Any] = {
        "count": len(ret),
        "insert_rate": insert_rate,
        "bytes_per_topic": ret.bytes_used / len(ret),
        "filters": [],
    }
    split = [t.split(b"/") for t in topics]

    def scan(levels: list[bytes]) -> list[int]:
        # the linear baseline: test every stored topic against the filter
        outl = []
        for i, tl in enumerate(split):
            ok = True
            for j, lv in enumerate(levels):
                if lv == b"#":
                    break
                if j >= len(tl) or (lv != b"+" and lv != tl[j]):
                    ok = False
                    break
            else:
                ok = len(levels) == len(tl)
            if ok:
                outl.append(i)
        return outl

    for filt in [b"r3/+/dev7/#", b"r3/site7/dev7/temp", b"+/+/dev7/temp", b"r1/site2/#"]:
        times = []
        got: list[int] = []
        for _ in range(max(4 * repeats + 1, 21)):
            t0 = time.perf_counter()
            got = ret.match(filt)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        want = scan(filt.split(b"/"))
        scan_s = time.perf_counter() - t0
        assert sorted(got) == want, filt
        res["filters"].append(
            {
                "filter": filt.decode(),
                "matches": len(got),
                "us": statistics.median(times) * 1e6,
                "scan_us": scan_s * 1e6,
            }
        )
    ret.close()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pubs", type=int, default=50_000, help="publishes per measured run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--retained", type=int, default=1_000_000)
    args = ap.parse_args()
    if not (BENCH / "pytrie.py").exists():
        print(f"bench_radix: {BENCH} not found", file=sys.stderr)
        return 2
    sys.path.insert(0, str(BENCH))
    pytrie = importlib.import_module("pytrie")
    print(f"# radix benchmark: {args.pubs} publishes x {args.repeats} repeats (medians)")
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-radix-") as tmpname:
        tmp = pathlib.Path(tmpname)
        for mode in ("low", "high"):
            r = bench_mode(tmp, mode, args.pubs, args.repeats, pytrie)
            print(
                f"\n## {mode} fan-out (average {r['fanout']:.1f} ids; {r['filters']:.0f} filters)"
            )
            print(f"dict trie insert        {r['trie_insert']:>12,.0f} subs/s")
            print(f"radix insert            {r['c_insert']:>12,.0f} subs/s (topic tree only)")
            print(f"radix insert+inversion  {r['c_insert_inv']:>12,.0f} subs/s")
            print(f"radix bytes/sub         {r['bytes_per_sub']:>12.1f} (topic tree only)")
            print(f"radix bytes/sub+inv     {r['bytes_per_sub_inv']:>12.1f} (with client tree)")
            print(f"dict trie match (set)   {r['trie_match']:>12,.0f} /s")
            print(
                f"radix match list[int]   {r['c_match_list']:>12,.0f} /s  "
                f"= {r['ratio_list']:.2f}x trie"
            )
            print(
                f"radix match call only   {r['c_match_call']:>12,.0f} /s  "
                f"= {r['ratio_call']:.2f}x trie"
            )
            print(f"radix match_detailed    {r['c_match_detailed']:>12,.0f} /s (iterated)")
            print(f"allocations per match   {r['allocs_per_match']:>12.4f}")
            if mode == "low":
                ok &= r["ratio_list"] >= 3
            else:
                ok &= r["c_match_call"] >= 150_000
                ok &= r["ratio_list"] >= 2
            ok &= r["c_insert"] >= 500_000 and r["bytes_per_sub"] <= 150
            ok &= r["allocs_per_match"] == 0
    rr = bench_retained(args.retained, args.repeats)
    print(
        f"\n## retained index: {rr['count']:,} topics, insert {rr['insert_rate']:,.0f}/s, "
        f"{rr['bytes_per_topic']:.1f} bytes/topic"
    )
    for f in rr["filters"]:
        print(
            f"{f['filter']:<22} {f['matches']:>7} matches  {f['us']:>10.1f} us  "
            f"(linear scan {f['scan_us']:>12,.0f} us, {f['scan_us'] / f['us']:,.0f}x)"
        )
    print(f"\ntargets met: {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

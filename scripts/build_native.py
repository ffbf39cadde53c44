"""Compile the hot path (``hotpath.MODULES``) with mypyc, in place.

    .venv/bin/python scripts/build_hotpath.py          # build unless current
    .venv/bin/python scripts/build_hotpath.py --clean  # remove the build: run interpreted

Needs mypy (it carries mypyc; the ``dev`` and ``native`` extras install it) and a C
compiler. Each module gets an extension module next to its ``.py`` and the group one
shared library, ``hotpath/lib__mypyc*.so``; then ``hotpath/hotpath.stamp`` records the digest of
the sources compiled, which ``hotpath.guard`` compares at every start. Nothing here
is committed (``.gitignore``). Exit status 1 when the build fails: the broker then runs
interpreted, as it does with ``JETMQ_NATIVE=0``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["JETMQ_NATIVE"] = "0"  # this process imports the sources, never a half build

import hotpath  # noqa: E402


def clean() -> None:
    """Remove every extension module of the list and the shared libraries of past builds."""
    hotpath.STAMP.unlink(missing_ok=True)
    for module in hotpath.MODULES:
        path = hotpath.source_path(module)
        for candidate in path.parent.glob(path.stem + ".*.so"):
            candidate.unlink()
    for shared in [*ROOT.glob("*__mypyc.*.so"), *ROOT.glob("*/*__mypyc.*.so")]:
        shared.unlink()


def build() -> None:
    from setuptools import setup  # type: ignore[import-untyped]

    from hotpath.build import extensions

    digest = hotpath.source_digest()
    clean()
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="jetmq-native-") as work:
        setup(
            name="jetmq-native",
            ext_modules=extensions(work),
            script_args=["-q", "build_ext", "--inplace", "--build-temp", work],
        )
    missing = [module for module in hotpath.MODULES if not hotpath.built(module)]
    if missing:
        raise RuntimeError(f"no extension module built for {', '.join(missing)}")
    hotpath.STAMP.write_text(digest + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the build and stop")
    parser.add_argument("--force", action="store_true", help="build even when current")
    args = parser.parse_args()
    if args.clean:
        clean()
        print("build_native: removed; the broker runs interpreted")
        return 0
    if hotpath.build_state() == "compiled" and not args.force:
        print("build_native: current")
        return 0
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("build_native: no C compiler (cc): the broker runs interpreted", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        build()
    except Exception as exc:  # mypyc or the compiler: say what, and leave no half build
        clean()
        print(f"build_native: failed ({exc}); the broker runs interpreted", file=sys.stderr)
        return 1
    print(
        f"build_native: {len(hotpath.MODULES)} modules compiled in {time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

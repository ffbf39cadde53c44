"""Compile the hot path (``hotpath.MODULES``) with mypyc, in place, guided by a profile.

    .venv/bin/python scripts/build_native.py           # build unless current
    .venv/bin/python scripts/build_native.py --no-pgo  # one plain build (about a third of the time)
    .venv/bin/python scripts/build_native.py --clean   # remove the build: run interpreted

Needs mypy (it carries mypyc; the ``dev`` and ``native`` extras install it) and a C
compiler. Each module gets an extension module next to its ``.py`` and the group one
shared library, ``hotpath/lib__mypyc*.so``; then ``hotpath/native.stamp`` records the digest of
the sources compiled, which ``hotpath.guard`` compares at every start. Nothing here
is committed (``.gitignore``). Exit status 1 when the build fails: the broker then runs
interpreted, as it does with ``JETMQ_NATIVE=0``.

With gcc the build is profile-guided, as CPython's own release builds are: an instrumented
build, a broker on it driven through its per-message and per-connect paths on loopback
(``hotpath.train``, a few seconds), then the build that uses the profile. gcc lays the code
that ran out together (``.text.hot``) and the rest aside, and arranges branches and
inlining by what ran. Should the instrumented build or the training fail, a plain build
follows (and says why); with another compiler the build is plain.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
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


# gcc's flags for the two profile-guided builds ({profile}: the profile's directory). The
# object files keep one path across both builds, so the second finds the first's counts.
# Code the training did not run is optimised as usual (partial training), and it is no
# error that a function has no profile (mypyc builds with -Werror).
PGO_GENERATE = "-fprofile-generate={profile} -fprofile-update=single"
PGO_USE = (
    "-fprofile-use={profile} -fprofile-partial-training -Wno-missing-profile -Wno-coverage-mismatch"
)


def build(work: str, cflags: str = "", kind: str = "") -> None:
    """One build into the tree, its objects in ``work``, with ``cflags`` added to the
    compiler's and the linker's flags; then the stamp (``kind`` after the digest:
    ``hotpath.INSTRUMENTED`` for the build only the training run uses)."""
    from setuptools import setup  # type: ignore[import-untyped]

    from hotpath.build import extensions

    digest = hotpath.source_digest()
    clean()
    os.chdir(ROOT)
    before = os.environ.get("CFLAGS")
    os.environ["CFLAGS"] = f"{before or ''} {cflags}".strip()  # (setuptools links with it too)
    try:
        setup(
            name="jetmq-native",
            ext_modules=extensions(work),
            script_args=["-q", "build_ext", "--inplace", "--force", "--build-temp", work],
        )
    finally:
        if before is None:
            del os.environ["CFLAGS"]
        else:
            os.environ["CFLAGS"] = before
    missing = [module for module in hotpath.MODULES if not hotpath.built(module)]
    if missing:
        raise RuntimeError(f"no extension module built for {', '.join(missing)}")
    hotpath.STAMP.write_text(f"{digest} {kind}".strip() + "\n")


def is_gcc() -> bool:
    """The C compiler setuptools will call is gcc (profile-guided builds are gcc's here)."""
    cc = os.environ.get("CC", "cc").split()[0]
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in done.stdout


def build_guided(work: str) -> str | None:
    """The profile-guided build; None when it is done, else why it was not (the tree then
    holds no build, or the instrumented one, which the caller replaces)."""
    from hotpath import train

    profile = os.path.join(work, "profile")
    objects = os.path.join(work, "objects")
    try:
        build(objects, PGO_GENERATE.format(profile=profile), hotpath.INSTRUMENTED)
        with train.broker() as port:
            train.drive(port)
        if not any(Path(profile).rglob("*.gcda")):
            return "the training run wrote no profile"
        build(objects, PGO_USE.format(profile=profile))
    except Exception as exc:  # any step: say what; the caller builds plain
        return f"{type(exc).__name__}: {exc}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the build and stop")
    parser.add_argument("--force", action="store_true", help="build even when current")
    parser.add_argument("--no-pgo", action="store_true", help="a plain build, no profile")
    args = parser.parse_args()
    if args.clean:
        clean()
        print("build_native: removed; the broker runs interpreted")
        return 0
    if hotpath.build_state() == "compiled" and not args.force:
        print("build_native: current")
        return 0
    if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
        print("build_native: no C compiler (cc): the broker runs interpreted", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="jetmq-native-") as work:
            why = "--no-pgo" if args.no_pgo else None if is_gcc() else "the compiler is not gcc"
            if why is None:
                why = build_guided(work)
                if why is not None:
                    print(f"build_native: no profile-guided build ({why}): a plain build")
            if why is not None:
                build(os.path.join(work, "plain"))
    except BaseException as exc:  # mypyc, the compiler, Ctrl-C: leave no half build
        clean()
        if not isinstance(exc, Exception):
            raise
        print(f"build_native: failed ({exc}); the broker runs interpreted", file=sys.stderr)
        return 1
    print(
        f"build_native: {len(hotpath.MODULES)} modules compiled"
        f" ({'plain' if why else 'profile-guided'}) in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

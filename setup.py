"""setuptools glue for what pyproject.toml cannot say: the cffi out-of-line build of
radix/_radix, and, in a wheel, the hot path compiled with mypyc (``hotpath.MODULES``, with
the stamp its guard checks). A checkout compiles the hot path in place instead
(``scripts/build_native.py``, run by ``./scripts/run`` and ``./scripts/test``), so an
editable install does not; ``JETMQ_NATIVE=0`` builds a wheel without it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hotpath  # noqa: E402  (standard library only)

NATIVE = "bdist_wheel" in sys.argv and os.environ.get(hotpath.ENV, "") != "0"


def native_extensions() -> list[Any]:
    if not NATIVE:
        return []
    from hotpath.build import extensions

    return extensions("build/mypyc")


class BuildPy(build_py):
    """Also writes the stamp of the compiled sources into the wheel."""

    def run(self) -> None:
        super().run()
        if NATIVE:
            stamp = Path(self.build_lib) / "hotpath" / hotpath.STAMP.name
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(hotpath.source_digest() + "\n")


setup(
    cffi_modules=["radix/build_radix.py:ffibuilder"],
    ext_modules=native_extensions(),
    cmdclass={"build_py": BuildPy},
)

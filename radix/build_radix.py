"""cffi out-of-line (API mode) build of ``radix._radix``.

Run by setuptools through ``cffi_modules`` (see setup.py) so ``pip install .``
compiles the extension. The cdef text is taken from radix.h between the
``CDEF-BEGIN`` / ``CDEF-END`` markers, so the header is the single source of
truth for the C API. ``RADIX_CFLAGS`` in the environment replaces the
optimisation flags (e.g. ``-O1 -g -fsanitize=address,undefined``).
"""

from __future__ import annotations

import os
import pathlib
import shlex

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
HEADER = HERE / "radix.h"
SOURCES = sorted(p for p in HERE.glob("src/*.c"))


def _cdef_text() -> str:
    text = HEADER.read_text(encoding="utf-8")
    start = text.index("/* CDEF-BEGIN */") + len("/* CDEF-BEGIN */")
    end = text.index("/* CDEF-END */")
    return text[start:end]


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
_opt = shlex.split(os.environ.get("RADIX_CFLAGS", "-O2"))
ffibuilder.set_source(
    "radix._radix",
    '#include "radix.h"',
    sources=[str(p.relative_to(HERE.parent)) for p in SOURCES],
    include_dirs=[str(HERE)],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", *_opt],
)

if __name__ == "__main__":
    # In-place rebuild for scripts/test: sources are relative to the repository root.
    os.chdir(HERE.parent)
    ffibuilder.compile(tmpdir=".", verbose=False)

"""The mypyc extensions of :data:`hotpath.MODULES`, for ``scripts/build_native.py`` (in
place, a checkout) and ``setup.py`` (a wheel). Imported only by a build: it needs mypy."""

from __future__ import annotations

import os
from typing import Any

import hotpath


def extensions(work: str) -> list[Any]:
    """The setuptools extensions of the group, its generated C in ``work``; paths are
    relative to the top of the tree (the build's working directory)."""
    from mypyc.build import mypycify

    paths = [str(hotpath.source_path(m).relative_to(hotpath.ROOT)) for m in hotpath.MODULES]
    # multi_file: the generated C in one file per module, not one large file.
    # group_name: the shared library is hotpath/lib__mypyc*.so, inside a package (an
    # editable install puts the packages on the path, not the top of the tree).
    built = mypycify(
        paths, opt_level="3", multi_file=True, target_dir=work, group_name=hotpath.GROUP
    )
    # The group's headers are written to <work>/hotpath/, where multi_file's C files (at
    # <work>) do not look for them (mypyc 2.4 with a dotted group name).
    headers = os.path.join(work, hotpath.GROUP.rpartition(".")[0])
    for extension in built:
        extension.include_dirs.append(headers)
    return list(built)

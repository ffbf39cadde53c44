"""How the environment fails: closed, unopenable, an unknown schema, a failed write, a
damaged record.

Standard library only: the read side (:mod:`store.readonly`, :mod:`store.keys`) raises them
too.
"""

from __future__ import annotations


class StoreClosedError(RuntimeError):
    """The store (or its environment) was used after close()."""


class StoreOpenError(RuntimeError):
    """The environment cannot be opened: not an LMDB environment, a damaged one, or one
    this jetmq cannot read. The message names the directory and the cause."""


class StorageFailure(RuntimeError):
    """LMDB failed a write transaction (a full disk, an I/O error): nothing of the jobs in
    it is stored. The message is LMDB's; the LMDB exception is the cause."""


class SchemaError(StoreOpenError):
    """The environment was written by a newer jetmq or has no known migration path."""


class RecordError(ValueError):
    """A stored record has an unknown version or a damaged layout."""

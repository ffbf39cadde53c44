"""PySpark data source and sink over jetmq's stored streams, and the jobs built on them.

Reads the store's layout from ``store.keys``; never imports ``broker``. Importing this
package is cheap: pyspark is loaded only when :class:`JetmqDataSource` is first used
(``from pipeline import JetmqDataSource``), so ``jetmq pipeline`` can say clearly when
pyspark is missing. See pipeline/DESIGN.md and docs/pipeline.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.source import JetmqDataSource

__all__ = ["JetmqDataSource"]


def __getattr__(name: str) -> Any:
    if name == "JetmqDataSource":
        from pipeline.source import JetmqDataSource

        return JetmqDataSource
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

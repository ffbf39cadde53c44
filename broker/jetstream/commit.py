"""Store operations JetStream waits for, in the broker's open write batch.

Everything the trio side of the broker writes in one scheduler pass joins one store job
(``broker.persist.client.Batch``): the acks and pull requests of many clients commit
together, as the PUBLISHes do. Trio thread only.
"""

from __future__ import annotations

from collections.abc import Sequence

import store
from broker.persist.client import StoreClient


async def commit(client: StoreClient, ops: Sequence[store.Op]) -> list[store.OpResult]:
    """Add ``ops`` to the open batch and wait for its commit; their results, in order
    (``StorageError`` if the commit failed)."""
    batch = client.open_batch()
    start = len(batch.ops)
    batch.ops.extend(ops)
    batch.awaited = True
    results = await batch.results()
    return results[start : start + len(ops)]

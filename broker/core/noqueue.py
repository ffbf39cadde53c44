"""NO_QUEUE: the queue every session shares until something is queued for it.

An empty ``deque`` costs 760 bytes, and most sessions never queue a copy (a QoS 0
client, a QoS 1 one whose copies go out at once), so ``Session.queue`` starts as this
shared, always empty one. Reading it is reading an empty queue; adding to it raises
(``Session.own_queue`` gives the session a queue of its own first). Not compiled
(``hotpath``): mypyc does not subclass ``deque``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final, NoReturn


class SharedEmptyQueue(deque[Any]):
    """A deque that stays empty: every way of adding to it raises."""

    def _refuse(self, *args: object) -> NoReturn:
        raise RuntimeError("NO_QUEUE is shared by sessions: add to Session.own_queue()")

    append = appendleft = extend = extendleft = insert = _refuse

    def __iadd__(self, other: object) -> NoReturn:
        self._refuse()


NO_QUEUE: Final[deque[Any]] = SharedEmptyQueue()

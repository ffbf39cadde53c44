"""Failed CONNECTs slowed down per address.

The first ``FREE_FAILURES`` failures from an address are answered at once; each further
one waits ``BASE_DELAY * 2**(n - FREE_FAILURES - 1)`` seconds, at most ``MAX_DELAY``,
before its refusal is sent (the wait holds only that connection's socket and task). An
address that has not failed for ``FORGET_AFTER`` seconds starts over, and so does one
that authenticates. At most ``MAX_ADDRESSES`` addresses are remembered (the oldest go).
"""

from __future__ import annotations

from collections import OrderedDict

FREE_FAILURES = 3
BASE_DELAY = 0.5
MAX_DELAY = 10.0
FORGET_AFTER = 300.0
MAX_ADDRESSES = 10_000


class Backoff:
    def __init__(self) -> None:
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def delay(self, address: str, now: float) -> float:
        """The wait before answering the next failure from ``address``."""
        entry = self._failures.get(address)
        if entry is None or now - entry[1] > FORGET_AFTER:
            return 0.0
        over = entry[0] - FREE_FAILURES
        if over < 0:
            return 0.0
        return float(min(MAX_DELAY, BASE_DELAY * 2**over))

    def failed(self, address: str, now: float) -> int:
        """Count a failure; returns how many in a row."""
        entry = self._failures.pop(address, None)
        count = 1 if entry is None or now - entry[1] > FORGET_AFTER else entry[0] + 1
        self._failures[address] = (count, now)
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)
        return count

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

"""IdleWait: the parking watcher waits for its sockets in place while trio has nothing to do.

Every trip through trio's loop for one wake-up costs the watcher more than serving a lone
QoS 1 PUBLISH does: re-arming its epoll registration, trio's epoll_wait, the event
dispatch, the reschedule, the task step (≈ a third of the broker's CPU at 2,000 msg/s,
py-spy). When no other task is runnable and no callback from another thread is queued, no other
task can run before some descriptor becomes readable or a deadline passes, so the watcher
may block on its own epoll set right there, as long as it also wakes when trio's epoll set
has something (trio's descriptors, its wake-up socket for other threads and signals) or
trio's next deadline comes. Then it hands the loop back to trio.

"No other task runnable" is counted by an instrument (trio's public hooks): tasks
scheduled minus task steps begun. Trio's run queue alone does not tell: trio empties it
into a batch before it runs the batch, so a task woken together with the watcher may be
waiting further down the same batch, its wake-up already taken from the epoll set.

This reads private attributes of trio's runner (its run queue's length, its deadlines,
its entry queue's two queues, its clock's offset and its epoll object). Where they are
not what this module expects (another trio version, another I/O backend, a clock that is
not the system clock, as in tests with ``MockClock``), ``IdleWait.open`` returns None
and the watcher always waits through trio.
"""

from __future__ import annotations

import math
import select
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any, Final

import trio

# The longest single wait in place: far longer than a wake-up costs, short enough that a
# runner state this module cannot see (none is known) would not stall the loop for long.
MAX_WAIT_SECONDS: Final = 1.0


def run_clock() -> Callable[[], float]:
    """The current run's clock as a function. For trio's ``SystemClock``, its reading
    (its fixed offset plus ``perf_counter``) without its Python method: compiled
    (hotpath), a call into C, read several times per wake-up. Any other clock
    (``MockClock`` in tests): its own ``current_time``."""
    clock = trio.lowlevel.current_clock()
    try:
        from trio._core import _run

        if type(clock) is _run.SystemClock:
            offset: float = clock.offset

            def now() -> float:
                return offset + perf_counter()

            return now
    except (AttributeError, ImportError):
        pass
    return clock.current_time


class _Steps(trio.abc.Instrument):
    """Counts tasks scheduled and task steps begun: their difference is the number of
    tasks runnable but not yet stepped, wherever trio holds them. Trio waits for I/O only
    between batches, when everything runnable is in its run queue: the count starts over
    from there (and until the first such wait, it is unknown: not 0)."""

    def __init__(self, runq: Any) -> None:
        self._runq = runq
        self.pending = 1

    def before_io_wait(self, timeout: float) -> None:
        self.pending = len(self._runq)

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        self.pending += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.pending -= 1


class IdleWait:
    def __init__(self, runner: Any, trio_epoll_fd: int, epoll_fd: int) -> None:
        # Every part of the runner read first: a missing one raises before trio counts.
        self._next_deadline: Callable[[], float] = runner.deadlines.next_deadline
        # Its heap of (deadline, id, cancel scope), read as next_deadline does (that is a
        # Python method, and a wait reads the next deadline every time). Read anew each
        # time: trio replaces the list when it prunes stale entries.
        self._deadlines: Any = runner.deadlines
        if not isinstance(self._deadlines._heap, list):
            raise TypeError("trio's deadlines are not a heap list")
        # Callbacks queued by other threads: trio's entry queue, read as its size() does.
        self._calls: deque[Any] = runner.entry_queue.queue
        self._idempotent_calls: dict[Any, None] = runner.entry_queue.idempotent_queue
        self._now = run_clock()
        self._steps = _Steps(runner.runq)
        self._trio_fd = trio_epoll_fd
        self._poll = select.poll()
        self._poll.register(trio_epoll_fd, select.POLLIN)
        self._poll.register(epoll_fd, select.POLLIN)
        self._trio_poll = select.poll()  # pauses: the parked sockets are left to gather
        self._trio_poll.register(trio_epoll_fd, select.POLLIN)
        self.waits = 0  # waits begun in place (tests, profiles)
        self.rounds = 0  # of them, those that ended with the parked sockets ready
        self.pauses = 0  # pauses that took their whole time in place
        trio.lowlevel.add_instrument(self._steps)

    @classmethod
    def open(cls, epoll_fd: int) -> IdleWait | None:
        """For the current trio run, or None where waiting in place is not safe."""
        try:
            from trio._core import _run

            runner: Any = _run.GLOBAL_RUN_CONTEXT.runner
            if type(runner.clock) is not _run.SystemClock or runner.is_guest:
                return None
            trio_epoll = runner.io_manager._epoll
            if not isinstance(trio_epoll, select.epoll):
                return None
            return cls(runner, trio_epoll.fileno(), epoll_fd)
        except (AttributeError, ImportError, TypeError):
            return None

    def wait(self) -> bool:
        """Block until the parked sockets are readable (True). False at once, or after a
        wait, when trio has something to do: a runnable task, a callback, an event on its
        own descriptors, a deadline."""
        if self._steps.pending or self._calls or self._idempotent_calls:
            return False
        timeout = min(self._deadline() - self._now(), MAX_WAIT_SECONDS)
        if timeout <= 0:
            return False
        self.waits += 1
        ready = self._poll.poll(math.ceil(timeout * 1000))
        # Ours alone: serve it here. Trio's too (or nothing: a deadline): trio's turn.
        if len(ready) == 1 and ready[0][0] != self._trio_fd:
            self.rounds += 1
            return True
        return False

    def pause(self, seconds: float) -> float | None:
        """Block for ``seconds`` without looking at the parked sockets (the watcher lets
        PINGREQs gather) while trio has nothing to do. None when the whole time passed
        here; else what is left of it (0 or more) for a trio sleep, which lets trio do what
        it has: at once when a task is runnable, a callback queued or a deadline of trio's
        comes first, and when trio's descriptors have an event."""
        if self._steps.pending or self._calls or self._idempotent_calls:
            return seconds
        now = self._now()
        if self._deadline() - now < seconds:
            return seconds
        if self._trio_poll.poll(math.ceil(seconds * 1000)):
            return max(now + seconds - self._now(), 0.0)
        self.pauses += 1
        return None

    def _deadline(self) -> float:
        """Trio's next deadline: its heap's first entry when that is current (the common
        case, read here), else trio's own method (which drops the stale entries)."""
        heap: list[tuple[float, int, Any]] = self._deadlines._heap
        if not heap:
            return math.inf
        deadline, _, scope = heap[0]
        if deadline == scope._registered_deadline:
            return deadline
        return self._next_deadline()

    def close(self) -> None:
        """The watcher ends: trio stops counting for it."""
        trio.lowlevel.remove_instrument(self._steps)

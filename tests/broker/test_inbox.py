"""Commit outcomes handed to the trio thread through the parking watcher
(broker.persist.inbox): run in the watcher's rounds, in order, once each, and through
``run_sync_soon`` once the watcher stopped; a broker's commits take that way."""

from __future__ import annotations

import functools
import os
import pathlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from broker.net.parking import Parking
from broker.net.runtime import Broker
from broker.persist.inbox import CommitInbox
from tests.broker.harness import make_config

pytestmark = pytest.mark.timeout(30)


class _Rounds:
    def __init__(self) -> None:
        self.begun = 0
        self.ended = 0
        self.inside: list[bool] = []  # per callback: inside a round?

    def begin(self) -> None:
        self.begun += 1

    def end(self) -> None:
        self.ended += 1


def _trio(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run the async test body in trio (the suite has no async test plugin)."""

    @functools.wraps(fn)
    def run(**kwargs: Any) -> None:
        trio.run(functools.partial(fn, **kwargs))

    return run


def _no_task(_conn: object) -> None:
    raise AssertionError("no connection is parked here")


@_trio
async def test_outcomes_put_from_threads_run_in_rounds_in_order() -> None:
    rounds = _Rounds()
    parking = Parking(_no_task, rounds.begin, rounds.end)
    inbox = CommitInbox(trio.lowlevel.current_trio_token())
    parking.watch_source(inbox.fd, inbox.run, inbox.stop)
    seen: list[int] = []
    done = trio.Event()

    def record(n: int) -> None:
        rounds.inside.append(rounds.begun == rounds.ended + 1)
        seen.append(n)
        if n == 999:
            done.set()

    def writer() -> None:
        for n in range(1000):
            inbox.put(record, n)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parking.run)
        thread = threading.Thread(target=writer)
        thread.start()
        with trio.fail_after(10):
            await done.wait()
        thread.join()
        nursery.cancel_scope.cancel()
    parking.close()
    inbox.release()
    assert seen == list(range(1000))
    assert all(rounds.inside)  # every one ran inside a watcher's round


@_trio
async def test_a_failing_callback_is_logged_and_the_rest_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox = CommitInbox(trio.lowlevel.current_trio_token())
    seen: list[int] = []

    def boom(_: object) -> None:
        raise RuntimeError("bug")

    inbox.put(boom, None)
    inbox.put(seen.append, 1)
    inbox.run()
    inbox.release()
    assert seen == [1]
    assert "internal error in a store commit's completion" in caplog.text


@_trio
async def test_after_stop_outcomes_go_through_the_loop() -> None:
    inbox = CommitInbox(trio.lowlevel.current_trio_token())
    seen: list[str] = []
    inbox.put(seen.append, "queued")
    inbox.stop()  # the watcher stopped: what is queued goes to the loop
    got = trio.Event()

    def last(value: str) -> None:
        seen.append(value)
        got.set()

    await trio.to_thread.run_sync(inbox.put, last, "after")
    with trio.fail_after(5):
        await got.wait()
    fd = inbox.fd
    inbox.release()
    inbox.release()  # once
    assert seen == ["queued", "after"]
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)


@_trio
async def test_watcher_close_stops_the_source() -> None:
    parking = Parking(_no_task, lambda: None, lambda: None)
    inbox = CommitInbox(trio.lowlevel.current_trio_token())
    parking.watch_source(inbox.fd, inbox.run, inbox.stop)
    parking.close()
    got = trio.Event()
    inbox.put(lambda _: got.set(), None)  # not served by a watcher: by the loop
    with trio.fail_after(5):
        await got.wait()
    inbox.release()


@_trio
async def test_a_brokers_commits_come_back_through_its_inbox(tmp_path: pathlib.Path) -> None:
    broker = await Broker.open(make_config(tmp_path / "data"))
    try:
        async with trio.open_nursery() as nursery:
            broker.attach(nursery)
            client = broker.store_client
            assert client._inbox is not None
            batch = client.open_batch()
            batch.awaited = True
            outcomes: list[bool] = []
            batch.callbacks.append(outcomes.append)
            run = client._inbox.run
            runs = 0

            def counted() -> None:
                nonlocal runs
                runs += 1
                run()

            # The watcher serves the inbox's descriptor with this function from now on.
            broker.parking._sources[client._inbox.fd] = (counted, client._inbox.stop)
            with trio.fail_after(10):
                await batch.wait()
            assert outcomes == [True]
            assert runs >= 1
            nursery.cancel_scope.cancel()
    finally:
        await broker.close()

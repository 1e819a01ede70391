"""One call in flight, shared by its waiters.

A waiter that arrives while the call is under way waits for that one instead of
starting its own, so fifty scrapes at once cost one read of the rig and a burst of
identical password checks one bcrypt run. A waiter that gives up (a scrape's
deadline, a client that hung up) stops waiting and nothing more: the call goes on
for the waiters still there and for the next one, because cancelling it would
leave its work half done on the other side (an engine renders an abandoned
/metrics request anyway, docs/stall-tracker.md#the-state-machine). Only `cancel()`
ends it: the owner is closing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class InFlight(Generic[T]):
    """`await shared()` runs `start()` unless a run of it is under way, and waits
    for that run either way."""

    def __init__(self, start: Callable[[], Awaitable[T]]) -> None:
        self._start = start
        self._running: asyncio.Future[T] | None = None

    @property
    def busy(self) -> bool:
        return self._running is not None and not self._running.done()

    async def __call__(self) -> T:
        if not self.busy:
            self._running = _started(self._start())
        assert self._running is not None
        return await asyncio.shield(self._running)

    def cancel(self) -> None:
        """End the run under way, if any: its waiters see CancelledError."""
        if self._running is not None:
            self._running.cancel()


class InFlightByKey(Generic[K, T]):
    """The same, one run per key: `await shared(key, start)` joins the run under way
    for `key`, or starts `start()` as it. A key leaves once its run has ended."""

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Future[T]] = {}

    def __len__(self) -> int:
        """The runs under way."""
        return len(self._running)

    def __contains__(self, key: object) -> bool:
        return key in self._running

    async def __call__(self, key: K, start: Callable[[], Awaitable[T]]) -> T:
        running = self._running.get(key)
        if running is None:
            running = self._running[key] = _started(self._run(key, start))
            # A run cancelled before its first step never reaches its `finally`.
            running.add_done_callback(lambda done: self._forget(key, done))
        return await asyncio.shield(running)

    async def _run(self, key: K, start: Callable[[], Awaitable[T]]) -> T:
        try:
            return await start()
        finally:  # within the run's last step: no waiter finds it ended and listed
            self._forget(key, self._running.get(key))

    def _forget(self, key: K, run: asyncio.Future[T] | None) -> None:
        if run is not None and self._running.get(key) is run:
            del self._running[key]


def _started(work: Awaitable[T]) -> asyncio.Future[T]:
    running = asyncio.ensure_future(work)
    # A failure nobody waits for any more is dropped, not logged as never retrieved.
    running.add_done_callback(lambda done: done.cancelled() or done.exception())
    return running

"""Blocking reads (sysfs, /proc) off the event loop, one at a time per source."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from exporter.snapshot import SourceError

T = TypeVar("T")


class BlockingRead:
    """Runs a blocking read (sysfs, /proc) in a worker thread, one at a time.

    A read stuck in the kernel (a GPU in reset) cannot be cancelled: its thread
    stays busy after the scrape's deadline. Starting another each scrape would
    use up the thread pool and stall every other source, so while one is still
    blocked the source fails at once and says so.
    """

    def __init__(self, read: Callable[[], T], what: str) -> None:
        self.read = read
        self.what = what
        self._pending: asyncio.Future[T] | None = None

    async def __call__(self) -> T:
        if self._pending is not None and not self._pending.done():
            raise SourceError(f"{self.what}: the previous read is still blocked")
        self._pending = asyncio.ensure_future(asyncio.to_thread(self.read))
        # A deadline cancels this wait, not the read: the thread finishes on its own.
        return await asyncio.shield(self._pending)

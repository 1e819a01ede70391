"""Blocking reads (sysfs, /proc) off the event loop, one at a time per source."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import PurePath
from types import FrameType
from typing import Generic, TypeVar

from exporter.daemon.snapshot import SourceError

T = TypeVar("T")


class BlockingRead(Generic[T]):
    """Runs a blocking read (sysfs, /proc) in a thread of its own, one at a time.

    A read stuck in the kernel (a GPU in reset) cannot be cancelled: its thread
    stays busy after the scrape's deadline. Starting another each scrape would
    pile up threads, so while one is still blocked the source fails at once and
    says so.

    The thread is a daemon, never one of asyncio's default executor: Python joins
    the executor's threads at the loop's close and at exit, with no timeout, so one
    stuck read would hold a stop for good (docs/deploy.md#stopping). Starting a
    thread per read costs about what the pool's hand-off does (0.1-0.4 ms a round
    trip either way on a shared 2-core box), once per source per scrape.
    """

    def __init__(self, read: Callable[[], T], what: str) -> None:
        self.read = read
        self.what = what
        self._pending: asyncio.Future[T] | None = None

    async def __call__(self) -> T:
        if self._pending is not None and not self._pending.done():
            raise SourceError(f"{self.what}: the previous read is still blocked")
        loop = asyncio.get_running_loop()
        self._pending = loop.create_future()
        threading.Thread(target=self._run, args=(loop, self._pending), daemon=True,
                         name=f"read: {self.what}").start()
        # A deadline cancels this wait, not the read: the thread finishes on its own.
        return await asyncio.shield(self._pending)

    def _run(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[T]) -> None:
        _running[threading.current_thread()] = (self.what, time.monotonic())
        try:
            result: tuple[T | None, BaseException | None] = (self.read(), None)
        except BaseException as exc:  # handed to the waiting coroutine, as to_thread does
            result = (None, exc)
        finally:
            del _running[threading.current_thread()]
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, *result)


def _settle(future: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]


#: Reads under way: thread -> (what, since when).
_running: dict[threading.Thread, tuple[str, float]] = {}


def stuck_reads() -> list[str]:
    """The reads still under way, each with how long and, where it can be told, the
    file it waits on: `GPU read under /sys: blocked 3.2 s on /sys/.../gpu_metrics`."""
    now, frames = time.monotonic(), sys._current_frames()
    found = []
    for thread, (what, since) in list(_running.items()):
        frame = frames.get(thread.ident) if thread.ident is not None else None
        where = _file_of(frame)
        found.append(f"{what}: blocked {now - since:.1f} s" + (f" on {where}" if where else ""))
    return found


def _file_of(frame: FrameType | None) -> str | None:
    """The file a blocked read waits on: the innermost frame that holds it, as a Path
    (`self` in pathlib) or as a `path` (the sysfs reader's `_read_until_eof`)."""
    while frame is not None:
        for name in ("self", "path"):
            held = frame.f_locals.get(name)
            if isinstance(held, PurePath) or (name == "path" and isinstance(held, str)):
                return os.fspath(held)
        frame = frame.f_back
    return None

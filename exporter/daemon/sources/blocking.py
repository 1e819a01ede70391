"""Blocking reads (sysfs, /proc) off the event loop, one at a time per source."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import PurePath
from types import FrameType
from typing import Generic, TypeVar

from exporter.daemon.snapshot import SourceError
from exporter.process.daemon_thread import in_daemon_thread
from exporter.process.in_flight import InFlight

T = TypeVar("T")


class BlockingRead(Generic[T]):
    """Runs a blocking read (sysfs, /proc) in a thread of its own, one at a time.

    A read stuck in the kernel (a GPU in reset) cannot be cancelled: its thread
    stays busy after the scrape's deadline. Starting another each scrape would
    pile up threads, so while one is still blocked the source fails at once and
    says so. The thread is a daemon (exporter/process/daemon_thread.py), so a
    stuck read never holds a stop; a deadline cancels the wait, not the read
    (exporter/process/in_flight.py).
    """

    def __init__(self, read: Callable[[], T], what: str) -> None:
        self.read = read
        self.what = what
        self._reading = InFlight(lambda: in_daemon_thread(self._timed, f"read: {what}"))

    async def __call__(self) -> T:
        if self._reading.busy:
            raise SourceError(f"{self.what}: the previous read is still blocked")
        return await self._reading()

    def _timed(self) -> T:
        _running[threading.current_thread()] = (self.what, time.monotonic())
        try:
            return self.read()
        finally:
            del _running[threading.current_thread()]


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

"""The end-to-end stack's simulated side: rigs whose exporters are real processes.

- Every process runs in its own session (process group) and its own temporary
  directory (`exporter.process.launch.Process`), and the tests' `ExitStack`s stop
  them in reverse order, even when a test fails.
- The simulated SGLang servers and the webhook receiver share one asyncio loop in
  a background thread (`LoopThread`); tests change a rig's state through it.
- Prometheus and Alertmanager: `exporter.rigctl.stack.Monitoring`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from exporter.process.event_loop import loop_factory

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; `run` waits for a coroutine's result. The
    exporter's loop (uvloop where installed): fifteen simulated servers share it, and
    a late token on a loaded box reads as a gap."""

    def __init__(self) -> None:
        self.loop = (loop_factory() or asyncio.new_event_loop)()
        self._thread = threading.Thread(target=self.loop.run_forever, name="e2e-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def call(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()
        return self.run(call())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

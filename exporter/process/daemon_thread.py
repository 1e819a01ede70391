"""A blocking call off the event loop, on a daemon thread of its own.

Never asyncio's default executor: Python joins its threads at the loop's close
and at exit, with no timeout, so one call stuck in the kernel (a sysfs read of a
GPU in reset) or a bcrypt check under way would hold a stop
(docs/deploy.md#stopping). A daemon thread is left behind instead. Starting one
costs about what the pool's hand-off does (0.1-0.4 ms a round trip either way on
a shared 2-core box).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def in_daemon_thread(call: Callable[[], T], name: str) -> asyncio.Future[T]:
    """`call()` on a new daemon thread named `name`; its result or exception on the
    returned future of the running loop. Cancelling the future stops the waiting,
    not the call: the thread ends when `call` returns."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (call(), None)
        except BaseException as exc:  # handed to the waiting coroutine, as to_thread does
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _settle(future: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if future.done():  # its waiter gave up
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]

"""Ctrl-C in a command that runs on an event loop: the work is cancelled at a point
where the loop is between callbacks, and the command sees KeyboardInterrupt once the
work's cleanup is done.

asyncio.run cancels its task from Python's signal handler, which runs between any
two bytecodes of whatever the loop is doing. Landing inside a transport's callback,
between its `fut.done()` check and its `fut.set_result()`, the cancel leaves the
callback to set a result on a cancelled future: `InvalidStateError` and a
traceback on stderr (seen once with `rigctl probe`;
docs/rigctl.md#ctrl-c). `loop.add_signal_handler` instead runs the handler as a
callback of its own, never inside another one. A second Ctrl-C while the cleanup
runs is Python's own KeyboardInterrupt: the way out of a cleanup that hangs.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_interruptible(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main); Ctrl-C cancels main at a safe point, lets its cleanup run,
    then raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)  # signals reach the main thread only
    return asyncio.run(_cancelled_on_ctrl_c(main))


async def _cancelled_on_ctrl_c(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    work = asyncio.ensure_future(main)
    interrupted = False

    def on_ctrl_c() -> None:
        nonlocal interrupted
        interrupted = True
        # From now on a Ctrl-C is Python's KeyboardInterrupt, wherever it lands.
        loop.remove_signal_handler(signal.SIGINT)
        work.cancel()

    loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
    try:
        result = await work
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    else:
        if interrupted:  # the work finished as the cancel came: Ctrl-C still wins
            raise KeyboardInterrupt
        return result
    finally:
        if not interrupted:
            loop.remove_signal_handler(signal.SIGINT)

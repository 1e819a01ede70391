"""A blocking call on a daemon thread of its own (exporter/process/daemon_thread.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from exporter.process.daemon_thread import in_daemon_thread


def test_the_result_and_the_thread() -> None:
    seen: list[threading.Thread] = []

    def call() -> int:
        seen.append(threading.current_thread())
        return 42

    async def run() -> int:
        return await in_daemon_thread(call, "read: test")

    assert asyncio.run(run()) == 42
    assert seen[0] is not threading.main_thread()
    assert seen[0].daemon and seen[0].name == "read: test"


def test_an_exception_reaches_the_waiter() -> None:
    def call() -> None:
        raise OSError("EIO on gpu_metrics")

    async def run() -> None:
        await in_daemon_thread(call, "read: test")

    with pytest.raises(OSError, match="EIO"):
        asyncio.run(run())


def test_giving_up_stops_the_wait_not_the_call() -> None:
    release, finished = threading.Event(), threading.Event()

    def blocked() -> None:
        release.wait(30)
        finished.set()

    async def run() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await in_daemon_thread(blocked, "read: stuck")

    asyncio.run(run())  # the loop closes while the call still blocks
    assert not finished.is_set()
    release.set()
    assert finished.wait(10)  # it ended on its own, with nobody to tell

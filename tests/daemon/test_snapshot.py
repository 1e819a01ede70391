"""The source runner: deadlines, errors, log lines on change, and blocked reads."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from exporter.daemon.snapshot import SourceError, SourceRunner
from exporter.daemon.sources.blocking import BlockingRead


class Flaky:
    name = "engine/flaky"

    def __init__(self) -> None:
        self.failing = True

    async def read(self) -> str:
        if self.failing:
            raise SourceError("HTTP 500")
        return "ok"


def test_down_and_recovery_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    source = Flaky()
    runner = SourceRunner([source], deadline_seconds=1.0)

    async def scrapes() -> list[bool]:
        ups = []
        for failing in (True, True, True, False, False):
            source.failing = failing
            ups.append((await runner.snapshot()).results[0].up)
        return ups

    with caplog.at_level(logging.INFO):
        assert asyncio.run(scrapes()) == [False, False, False, True, True]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["source engine/flaky down: HTTP 500",
                        "source engine/flaky recovered after 0 s (2 more failures not logged)"]


def test_a_read_stuck_in_the_kernel_does_not_pile_up_threads() -> None:
    release = threading.Event()
    calls = []

    def stuck_read() -> str:
        calls.append(1)
        release.wait(10)
        return "card tree"

    class Stuck:
        name = "gpu"
        read = BlockingRead(stuck_read, "GPU read")

    runner = SourceRunner([Stuck()], deadline_seconds=0.2)

    async def scrapes():
        first = await runner.snapshot()
        second = await runner.snapshot()
        release.set()
        await asyncio.sleep(0.1)  # the stuck thread finishes on its own
        third = await runner.snapshot()
        return first.results[0], second.results[0], third.results[0]

    first, second, third = asyncio.run(scrapes())
    assert first.error == "no answer within 0.2 s"
    assert second.error == "GPU read: the previous read is still blocked"
    assert second.duration_seconds < 0.1  # failed at once, no second thread
    assert third.up and third.reading == "card tree"
    assert len(calls) == 2  # the stuck read, then the fresh one

"""Stopping: a cancellation that lands as a read completes must end the task. On
Python 3.11 asyncio.wait_for could swallow it (CPython gh-86296), and the exporter kept
polling the engine for minutes after Ctrl-C (docs/stall-tracker.md#stopping)."""

from __future__ import annotations

import asyncio
import random

import pytest

from exporter.config import Config, GpuConfig, HostConfig
from exporter.daemon.engines.stall.evidence import Evidence
from exporter.daemon.engines.stall.planner import Planner
from exporter.daemon.engines.stall.plans import Counters
from exporter.daemon.engines.stall.tracker import StallPoller
from exporter.daemon.runtime import Exporter
from exporter.daemon.snapshot import read_source
from tests.daemon.engines.helpers import engine_config
from tests.support.sglang_release import ReleasePlayback, ReleaseServer


class HeldReader:
    """A reader whose every read waits until the test completes it."""

    how = "held by the test"

    def __init__(self) -> None:
        self.pending: asyncio.Future[Counters] | None = None
        self.reads = 0

    async def read(self) -> Counters:
        self.reads += 1
        self.pending = asyncio.get_running_loop().create_future()
        return await self.pending

    def resolution_seconds(self, standing_still: bool = False) -> float:
        return 0.0

    def close(self) -> None:
        pass


async def _until(condition, limit: int = 1000) -> None:
    for _ in range(limit):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


@pytest.mark.parametrize("iterations_after_completion", range(8))
def test_tracker_cancelled_around_a_completed_read_stops(iterations_after_completion):
    """Complete a read, let the loop turn k times, cancel: the task must end cancelled,
    whatever the tracker was doing at that moment (observing, sleeping, reading again)."""

    async def scenario() -> None:
        reader = HeldReader()
        poller = StallPoller(reader, Planner("main", Evidence("0.5.23")))
        task = asyncio.create_task(poller.run())
        await _until(lambda: reader.pending is not None)
        reader.pending.set_result(Counters(decode_passes=1.0, running=1.0))
        for _ in range(iterations_after_completion):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2.0)
        assert task in done, "the tracker went on after being cancelled"
        assert task.cancelled()

    asyncio.run(scenario())


@pytest.mark.parametrize("iterations_after_completion", range(4))
def test_source_read_cancelled_as_it_completes_stops(iterations_after_completion):
    class Held:
        name = "held"

        def __init__(self) -> None:
            self.pending: asyncio.Future[object] | None = None

        async def read(self) -> object:
            self.pending = asyncio.get_running_loop().create_future()
            return await self.pending

    async def scenario() -> None:
        source = Held()
        task = asyncio.create_task(read_source(source, 5.0))
        await _until(lambda: source.pending is not None)
        source.pending.set_result(object())
        for _ in range(iterations_after_completion):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2.0)
        assert task in done
        # Cancelled, or finished before the cancellation could land: never swallowed
        # into a result after cancel() was accepted.
        assert task.cancelled() or iterations_after_completion > 0

    asyncio.run(scenario())


def test_exporter_stops_mid_poll_200_times_each_within_2_s():
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        playback = ReleasePlayback("0.5.23")
        playback.start_requests(streaming=2)
        server = ReleaseServer(playback, answer_delay_seconds=0.003)
        await server.start()
        rng = random.Random(7)
        stops = []
        try:
            config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                            engines=(engine_config(server.url,
                                                   stall_poll_interval_seconds=0.001),))
            for _ in range(200):
                exporter = Exporter(config)
                await exporter.start()
                await asyncio.sleep(rng.uniform(0.0, 0.02))
                began = loop.time()
                async with asyncio.timeout(10.0):
                    await exporter.close()
                stops.append(loop.time() - began)
        finally:
            await server.stop()
            playback.close()
        return stops

    stops = asyncio.run(scenario())
    assert len(stops) == 200
    assert max(stops) < 2.0, f"slowest stop {max(stops):.2f} s"

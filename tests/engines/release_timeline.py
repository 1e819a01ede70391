"""Play a release's timeline on a simulated clock through the stall tracker's real loop.

The playback writes real prometheus_client multiprocess files and serves /metrics over
loopback HTTP the way SGLang renders it; the tracker's own `run()` loop polls it, with
its sleeps moving the simulated clock, so a 30 s timeline takes well under a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from exporter.engines.fetch import get_text
from exporter.engines.stall.plans import plan_for
from exporter.engines.stall.readers import MetricsBody, MetricsReader, MultiprocReader
from exporter.engines.stall.tracker import StallPoller, StallState
from tests.support.sglang_release import ReleasePlayback, ReleaseServer

TICK = 0.25
MODES = ("files", "metrics")
#: Each simulated /metrics render holds the engine this long (24-45 ms measured for
#: the 0.5.23 family set on a 2-core box): the budget spaces polls 1.67 s apart.
RENDER_COST = 0.03


class SimClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _End(Exception):
    pass


Events = dict[float, Callable[[ReleasePlayback], None]]


@dataclass
class Outcome:
    final: StallState
    #: The longest `current` stall the tracker reported on the way.
    longest_current: float
    resolution_seconds: float
    renders: int


def play(version: str, mode: str, seconds: float, events: Events,
         mixed_chunk: bool = False) -> Outcome:
    async def scenario() -> Outcome:
        clock = SimClock()
        playback = ReleasePlayback(version, clock=clock, mixed_chunk=mixed_chunk)
        server = ReleaseServer(playback, patience_seconds=2.0, advance=clock.advance,
                               render_cost_seconds=RENDER_COST)
        await server.start()
        start = clock.now
        pending = sorted(events.items())
        longest = 0.0

        async with aiohttp.ClientSession() as session:
            if mode == "files":
                reader = MultiprocReader(playback.directory, TICK)
            else:
                reader = MetricsReader(
                    MetricsBody(lambda: get_text(session, server.url + "/metrics"),
                                clock=clock, timer=clock), TICK)
            plan = plan_for(version)
            assert plan is not None

            async def sim_sleep(delay: float) -> None:
                nonlocal longest
                longest = max(longest, poller.state().current_seconds)
                clock.advance(delay)
                playback.sync()  # the engine runs on as time passes
                while pending and pending[0][0] <= clock.now - start:
                    pending.pop(0)[1](playback)
                if clock.now - start > seconds:
                    raise _End

            poller = StallPoller(reader, plan, clock=clock, timeout_seconds=2.0,
                                 sleep=sim_sleep)
            try:
                while pending and pending[0][0] <= 0:
                    pending.pop(0)[1](playback)
                await poller.run()
            except _End:
                pass
            finally:
                reader.close()
                await server.stop()
                playback.close()
            return Outcome(poller.state(), longest, reader.resolution_seconds(),
                           server.renders)

    return asyncio.run(scenario())

"""Play a release's timeline on a simulated clock through the stall tracker's real loop.

The playback writes real prometheus_client multiprocess files and serves /metrics,
/server_info and /v1/loads over loopback HTTP the way SGLang does; the tracker's
plan is chosen from what those answer (the engine source's own evidence code), and
its own `run()` loop polls, with its sleeps moving the simulated clock, so a 30 s
timeline takes well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from exporter.daemon.engines.fetch import get_text
from exporter.daemon.engines.info import fetch_info
from exporter.daemon.engines.source import engine_evidence
from exporter.daemon.engines.stall.planner import Planner
from exporter.daemon.engines.stall.plans import SignalPlan
from exporter.daemon.engines.stall.readers import MetricsBody, MetricsReader, MultiprocReader
from exporter.daemon.engines.stall.tracker import StallPoller, StallState
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
    final: StallState | None
    #: The longest `current` stall the tracker reported on the way.
    longest_current: float
    resolution_seconds: float
    renders: int
    plan: SignalPlan | None
    #: Every stall that ended: (ended at, lower, upper bound), seconds from the start.
    stalls: list[tuple[float, float, float]] = field(default_factory=list)
    #: The engine's requests per path (the /v1/loads probe among them).
    requests: dict[str, int] = field(default_factory=dict)

    def estimates(self) -> list[float]:
        """Each stall's midpoint, as the alerts judge it."""
        return [(low + high) / 2 for _, low, high in self.stalls]


def play(version: str, mode: str, seconds: float, events: Events,
         render_cost: float = RENDER_COST, **playback: Any) -> Outcome:
    """`playback`: ReleasePlayback fields (mixed_chunk, reported_version, ...)."""

    async def scenario() -> Outcome:
        clock = SimClock()
        engine = ReleasePlayback(version, clock=clock, **playback)
        server = ReleaseServer(engine, patience_seconds=2.0, advance=clock.advance,
                               render_cost_seconds=render_cost)
        await server.start()
        start = clock.now
        pending = sorted(events.items())
        longest = 0.0
        stalls: dict[float, tuple[float, float, float]] = {}

        async with aiohttp.ClientSession() as session:
            info = await fetch_info(session, server.url, "sglang")
            planner = Planner("main", await engine_evidence(session, server.url, info))
            if mode == "files":
                reader = MultiprocReader(engine.directory, TICK, clock=clock)
            else:
                reader = MetricsReader(
                    MetricsBody(lambda: get_text(session, server.url + "/metrics"),
                                clock=clock, timer=clock), TICK)

            async def sim_sleep(delay: float) -> None:
                nonlocal longest
                state = poller.state()
                if state is not None:
                    longest = max(longest, state.current_seconds)
                for ended, low, high in poller.tracker.recent(clock.now):
                    stalls[ended] = (ended - start, low, high)
                until = clock.now + delay
                # The engine runs on as time passes; an event lands at its own time,
                # between polls.
                while pending and start + pending[0][0] <= until:
                    clock.now = max(clock.now, start + pending[0][0])
                    engine.sync()
                    pending.pop(0)[1](engine)
                clock.now = until
                engine.sync()
                if clock.now - start > seconds:
                    raise _End

            poller = StallPoller(reader, planner, clock=clock, timeout_seconds=2.0,
                                 sleep=sim_sleep)
            try:
                while pending and pending[0][0] <= 0:
                    pending.pop(0)[1](engine)
                with contextlib.suppress(_End):
                    await poller.run()
            finally:
                reader.close()
                await server.stop()
                engine.close()
            return Outcome(poller.state(), longest, reader.resolution_seconds(),
                           server.renders, planner.plan, sorted(stalls.values()),
                           server.requests)

    return asyncio.run(scenario())

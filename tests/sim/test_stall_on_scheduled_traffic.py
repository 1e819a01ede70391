"""The decode stall tracker, as it stands, on traffic the scheduler model makes by
itself: A decodes on 64K, B's fresh 64K prompt starves it. Simulated time on a fake
clock shared by the engine and the tracker; real loopback HTTP for every poll."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from exporter.daemon.engines.fetch import get_text
from exporter.daemon.engines.stall.evidence import Evidence
from exporter.daemon.engines.stall.planner import Planner
from exporter.daemon.engines.stall.readers import MetricsBody, MetricsReader
from exporter.daemon.engines.stall.tracker import StallPoller
from exporter.sim.engine.scheduler import Policy
from exporter.sim.engine.state import SimEngine
from tests.daemon.engines.helpers import running_sim

TICK = 0.5


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def longest_stall(policy: Policy) -> tuple[float, float]:
    """(the tracker's longest stall, A's longest gap in the scheduler)."""
    async def scenario() -> tuple[float, float]:
        clock = FakeClock()
        state = SimEngine(clock=clock, policy=policy)
        a = state.submit(65536, 10**6, cached={"device": 65535})
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            body = MetricsBody(lambda: get_text(session, server.url + "/metrics"), clock)
            planner = Planner("main", Evidence(state.version))
            poller = StallPoller(MetricsReader(body, TICK), planner,
                                 clock=clock)
            b = None
            longest = 0.0
            for step in range(int(62 / TICK)):
                if step * TICK >= 5.0 and b is None:
                    b = state.submit(65536, 1)
                await poller.poll_once()
                longest = max(longest, poller.state().max_recent_seconds)
                clock.now += TICK
            assert b is not None and b.done
            return longest, a.longest_gap()

    return asyncio.run(scenario())


@pytest.mark.parametrize("policy", ["default", "n=1"])
def test_tracker_sees_the_stall_the_scheduler_makes(policy):
    tracked, gap = longest_stall(Policy.named(policy))
    assert gap == pytest.approx({"default": 46.6, "n=1": 3.83}[policy], abs=0.1)
    assert tracked == pytest.approx(gap, abs=2 * TICK)

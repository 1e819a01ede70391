"""The simulated rig's compressed time: one convention (F times faster than real),
rescaling mid-scenario, and stalls that compress by their own factor."""

from __future__ import annotations

import asyncio

import pytest

from exporter.sim.rig.clock import ScenarioClock
from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios.base import Step, scenario
from exporter.sim.scenarios.player import play


class FakeReal:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_clock_runs_f_times_faster_and_stays_continuous_across_a_rescale() -> None:
    real = FakeReal()
    clock = ScenarioClock(10.0, real)
    real.now += 2.0
    assert clock.now() == pytest.approx(20.0)
    assert clock.real_seconds(30.0) == pytest.approx(3.0)
    clock.rescale(2.0)
    assert clock.now() == pytest.approx(20.0)
    real.now += 1.0
    assert clock.now() == pytest.approx(22.0)
    with pytest.raises(ValueError, match="greater than 0"):
        clock.rescale(0)


def test_the_fault_plays_at_its_own_scale_and_stalls_at_theirs(tmp_path) -> None:
    seen: list[tuple[str, float]] = []

    def note(phase: str):
        def act(rig: SimRig) -> None:
            seen.append((phase, rig.clock.time_scale))
        return act

    def stall(rig: SimRig) -> None:
        note("fault")(rig)
        before = rig.clock.now()
        rig.pause_decode(47.23)
        # Scenario seconds of pause: 47.23 s of the rig's stall at x4 real compression.
        seen.append(("pause", rig.engine.scheduler.decode_paused_until - before))

    played = scenario("t", "A test.\n\nMust raise: -\nMust not raise: -",
                      (Step(0.0, "lead-in", "healthy", note("lead-in")),
                       Step(20.0, "fault", "stall", stall)),
                      seconds=21.0, expects=(), must_not=set(), fault_at=20.0)

    async def run() -> None:
        async with SimRig(time_scale=200.0, directory=tmp_path, stall_scale=4.0) as rig:
            await play(rig, played, fault_time_scale=50.0)

    asyncio.run(run())
    assert seen[:2] == [("lead-in", 200.0), ("fault", 50.0)]
    # 47.23 s of stall lasts 47.23 / 4 real seconds: 590 scenario seconds at x50.
    assert seen[2][1] == pytest.approx(47.23 * 50.0 / 4.0, rel=1e-3)

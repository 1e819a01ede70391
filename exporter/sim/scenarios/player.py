"""Plays a scenario's timeline on a SimRig: each step at its scenario second, said
as it happens."""

from __future__ import annotations

import inspect

from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios.base import Scenario


async def play(rig: SimRig, scenario: Scenario, time_scale: float | None = None,
               stop_at: float | None = None, fault_time_scale: float | None = None) -> None:
    """Play `scenario` from its start; `stop_at` ends it early (scenario seconds).
    With `fault_time_scale`, the steps after the lead-in play at that scale (a
    test can hurry through the healthy minute)."""
    if time_scale is not None:
        rig.rescale(time_scale)
    start = rig.scenario_started_at = rig.clock.now()
    end = scenario.seconds if stop_at is None else min(stop_at, scenario.seconds)
    rig.say(f"scenario {scenario.name}: {scenario.summary} "
             f"({scenario.seconds:g} s at time scale {rig.clock.time_scale:g})")
    for step in scenario.steps:
        if step.at > end:
            break
        await rig.sleep_until(start + step.at)
        if fault_time_scale is not None and step.phase != "lead-in":
            rig.rescale(fault_time_scale)
            fault_time_scale = None
        rig.phase = step.phase
        outcome = step.act(rig)
        if inspect.isawaitable(outcome):
            await outcome
        rig.say(f"[{step.at:7.1f} s] {step.phase}: {step.says}")
    await rig.sleep_until(start + end)
    rig.say(f"[{end:7.1f} s] scenario {scenario.name} done")

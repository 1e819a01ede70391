"""The simulated rig's scenarios (docs/simulator.md#the-scenarios), one module each, by name.

Each module's docstring says the real event it reproduces, with its numbers
from docs/facts/rig.md, and which alerts it must raise and must not; `expects` and
`must_not` carry the same as data.
"""

from __future__ import annotations

from exporter.sim.scenarios import (
    engine_down,
    engine_wedged,
    four_agents_hog,
    gpu_missing,
    healthy,
    hicache_thrash,
    kv_saturated,
    l3_miss_storm,
    mixed_chunk_stutter,
    power_capped,
    prefill_starves_decode,
    queue_hog,
    swap_storm,
    thermal_downclock,
    working_set_overflow,
)
from exporter.sim.scenarios.base import Expect, Scenario, Step

__all__ = ["SCENARIOS", "Expect", "Scenario", "Step"]

SCENARIOS: dict[str, Scenario] = {
    module.SCENARIO.name: module.SCENARIO
    for module in (
        healthy, prefill_starves_decode, mixed_chunk_stutter, thermal_downclock,
        power_capped, hicache_thrash, l3_miss_storm, swap_storm, kv_saturated,
        queue_hog, engine_down, engine_wedged, gpu_missing, four_agents_hog,
        working_set_overflow,
    )
}

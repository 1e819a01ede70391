"""A card falls off the bus.

docs/gpu.md#which-cards: a card that disappears (a driver reset, a card fallen off the bus)
keeps its series with rig_gpu_present 0, so it alerts instead of going silent.
Here card2's DRM entry vanishes for three minutes and then comes back (as after
a successful GPU reset). On the real rig a TP=2 engine would hang or crash with
it; that is left out so that the GPU alerts are tested alone (engine-wedged and
engine-down cover the engine's side).

Must raise: RigGpuMissing{signal="vanished", card="card2"} (rig_gpu_present 0,
for 1 m).
Must not raise: RigGpuMissing{signal="count"} (it pages only for cards never
seen; this one pages as itself), RigGpuThermalDownclock, RigGpuHot, RigGpuPowerCapped,
RigExporterSourceDown (the GPU source still answers for card1).
"""

from __future__ import annotations

from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held


def card2_falls_off(rig) -> None:
    rig.remove_card("card2")


SCENARIO = fault_held(
    "gpu-missing", __doc__, "card2 falls off the bus", card2_falls_off,
    DEFAULTS.gpu_missing_for_seconds,
    expects=(Expect("RigGpuMissing", {"signal": "vanished", "card": "card2",
                                      "severity": "critical"}),),
    must_not={"RigGpuThermalDownclock", "RigGpuHot", "RigGpuPowerCapped",
              "RigExporterSourceDown"},
    heal_says="card2 is back after a GPU reset",
)

"""Both cards run at their lowered power cap through a burst of cold prefills.

docs/facts/rig.md#hardware-and-software: the owner lowered the board power limit
from about 330 W to 305 W, the lowest allowed. Prefill is compute-bound, so during
long cold prefills (two concurrent 64K prefills run at 2,720 tok/s aggregate) both cards draw at
the cap and the SMU's PPT0 limit holds their clocks (docs/facts/amdgpu.md#throttle-status-bits:
PPT0 follows power1_cap and is "working as configured" during LLM prefill).
Here card1 draws 301 W and card2 303 W with PPT0 set, sclk 2050 and 1980 MHz
(89 % and 86 % of the top level), junctions at 95 and 98 °C, for seven minutes.

Must raise: RigGpuPowerCapped{card="card1"} and {card="card2"} (info: power at
95 % of the cap or more with the power throttle reason, for 5 m).
Must not raise: RigGpuThermalDownclock (the clocks stay above 80 % of max and
no junction is within 5 °C of its limit), RigGpuHot (12 °C of headroom or more).
"""

from __future__ import annotations

import dataclasses

from exporter.sim.rig.baseline import THROTTLE_HOTSPOT, THROTTLE_PPT0, card
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held

COLD_PREFILL_TOKENS_PER_SECOND = 2_720.0  # 2 concurrent 64K prefills (docs/facts/rig.md)


def cards_at_cap(rig) -> None:
    throttle = THROTTLE_HOTSPOT | THROTTLE_PPT0
    rig.put_card(card(rig.cards["card1"], edge=70, junction=95, memory=86, watts=301,
                      sclk_mhz=2050, busy_percent=100, throttle_status=throttle))
    rig.put_card(card(rig.cards["card2"], edge=75, junction=98, memory=92, watts=303,
                      sclk_mhz=1980, busy_percent=100, throttle_status=throttle))
    rig.set_flows(dataclasses.replace(
        rig.flows, prompt_tokens=rig.flows.prompt_tokens + COLD_PREFILL_TOKENS_PER_SECOND))


SCENARIO = fault_held(
    "power-capped", __doc__, "cold prefills: both cards at the 305 W cap, PPT0 set",
    cards_at_cap, DEFAULTS.gpu_power_capped_for_seconds,
    expects=(Expect("RigGpuPowerCapped", {"card": "card1", "severity": "info"}),
             Expect("RigGpuPowerCapped", {"card": "card2", "severity": "info"})),
    must_not={"RigGpuThermalDownclock", "RigGpuHot"},
    heal_says="prefills done: back under the cap",
)

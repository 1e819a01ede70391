"""The upper card overheats and holds its clock down under load.

docs/facts/rig.md#hardware-and-software: the two cards sit about 5 mm apart, so the
upper card breathes the lower card's exhaust; before two high-pressure fans were added both cards
crossed their warning temperatures and throttled, which skewed the first
benchmark rounds. Here card2's junction climbs to 107 °C (limit 110 °C,
docs/facts/amdgpu.md#rx-7900-xtx-numbers) with its fan near its 3200 rpm maximum, and its sclk
falls to 1650 MHz (72 % of the 2304 MHz top level) at 100 % busy, drawing less
power (236 W) because the clock is down. Its memory reads 96 °C (limit 108 °C).
The fault holds for four minutes, then the fans win.

Must raise: RigGpuThermalDownclock{card="card2", severity="warning"} (sclk under
80 % of max, busy, junction within 5 °C of its limit, for 2 m) and
RigGpuHot{card="card2", sensor="junction"} (within 10 °C, for 2 m).
Must not raise: RigGpuThermalDownclock{severity="critical"} (needs 10 m),
RigGpuHot{sensor="memory"} (12 °C of headroom), RigGpuPowerCapped (236 W of
305 W, no PPT bit), anything on card1.
"""

from __future__ import annotations

from exporter.sim.rig.baseline import THROTTLE_HOTSPOT, card
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held


def card2_overheats(rig) -> None:
    rig.put_card(card(rig.cards["card2"], edge=88, junction=107, memory=96, watts=236,
                      sclk_mhz=1650, busy_percent=100, throttle_status=THROTTLE_HOTSPOT,
                      fan_rpm=3150))


SCENARIO = fault_held(
    "thermal-downclock", __doc__,
    "card2 junction 107 °C, sclk held at 1650 MHz under full load", card2_overheats,
    max(DEFAULTS.gpu_downclock_for_seconds, DEFAULTS.gpu_hot_for_seconds),
    expects=(Expect("RigGpuThermalDownclock", {"card": "card2", "severity": "warning"}),
             Expect("RigGpuHot", {"card": "card2", "sensor": "junction", "severity": "warning"})),
    must_not={"RigGpuPowerCapped", "RigCpuHot", "RigDecodeStarvation"},
    heal_says="the fans catch up: card2 back to 93 °C and full clock",
)

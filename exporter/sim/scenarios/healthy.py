"""The healthy rig: nothing fires.

docs/facts/rig.md, the owner's normal day: two long-lived agents with 64K sessions take
turns (a turn a minute each, the session served from L1 plus ~2K new tokens),
decoding about 100 tok/s together. Both 7900 XTX cards work under the 305 W cap
with the junction at 84 and 93 °C (the upper card breathes the lower one's
exhaust) and sclk near its top level; only the Navi 31 hotspot throttle bit is
set, as it is even at idle. The host has 19 GiB of its 64 GB available and
62 MiB of swap that does not grow. The CPU's Tctl reads 68 °C.

Must raise: nothing, over ten minutes of scenario time.
Must not raise: any alert (the near misses: the hotspot bit alone,
card2's x8 slot link below its x16 maximum, two running requests with an empty
queue, L1 hits with no eviction).
"""

from __future__ import annotations

from exporter.sim.scenarios.base import lead_in, scenario

SCENARIO = scenario(
    "healthy", __doc__, lead_in(), seconds=600.0, expects=(),
    must_not={"RigDecodeStarvation", "RigGpuThermalDownclock", "RigHiCacheThrash",
              "RigHostMemoryPressure", "RigGpuPowerCapped", "RigGpuPcieDegraded"},
    fault_at=None,
)

"""The host runs short of RAM and swaps hard.

docs/facts/rig.md#kv-capacity: production runs --hicache-size 20, whose L2 host pool and Mamba
state take about 40 GB of the 64 GB host; during the owner's tests 19 GiB stayed
available and swap held 62 MiB without growing. Derived here (not a measured
event): the agents' tools and a build push past that margin, available RAM falls
to 8 % (5.1 GiB), and the kernel swaps out 24 MiB/s and back in 16 MiB/s, so
swap use grows by 8 MiB/s; tasks stall on memory part of the time (PSI some
30 %, full 4 %). Twelve minutes, then the tools finish.

Must raise: RigHostSwapping (swap traffic of 40 MiB/s, over the 1 MiB/s
threshold, and swap use growing, for 10 m).
Must not raise: RigHostMemoryPressure (8 % available is over the 5 % floor; PSI
full 4 % is under 10 %), RigCpuHot, RigHiCacheHostPoolFull.
"""

from __future__ import annotations

from exporter.sim.rig.procfs_writer import MIB
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held


def memory_runs_short(rig) -> None:
    rig.set_host(memory_available_bytes=0.08 * rig.host.memory_total_bytes,
                 swap_out_bytes_per_second=24 * MIB, swap_in_bytes_per_second=16 * MIB,
                 pressure_some_ratio=0.30, pressure_full_ratio=0.04)


SCENARIO = fault_held(
    "swap-storm", __doc__,
    "8 % of RAM available: swapping out 24 MiB/s and in 16 MiB/s", memory_runs_short,
    DEFAULTS.host_swapping_for_seconds,
    expects=(Expect("RigHostSwapping", {"severity": "warning"}),),
    must_not={"RigHostMemoryPressure", "RigCpuHot", "RigHiCacheHostPoolFull"},
    heal_says="the tools finish: RAM back, swap quiet",
)

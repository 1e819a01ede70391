"""L3 is written but every lookup misses: the hash-chain bug.

docs/facts/rig.md#l3-failure: the L3 hash chain resumed from the wrong
previous-page hash, so every L3 key computed after it was wrong; the files were
on the SSD, yet every lookup missed. Here L2 sits near full (96 %) and writes
its evictions to L3 (2,000 tok/s), while the two agents' sessions, dropped from
L1 and L2, come back to L3 and find nothing: every prompt token is recomputed
(2,200 tok/s, within the 2,720 tok/s of two concurrent prefills) and the
prefetch counter never moves (SGLang has not even created it). Twelve minutes.

Must raise: RigHiCacheStorageMisses (L3 written, nothing prefetched back, and
long prompts that missed every tier, for 10 m).
Must not raise: RigHiCacheThrash (nothing is loaded back from L2, so no churn;
L2 is not full enough for the recompute signal), RigHiCacheHostPoolFull (96 %
is under 98 %), RigKVPoolSaturated.
"""

from __future__ import annotations

from exporter.sim.rig.baseline import L2_CAPACITY_TOKENS, SESSION_TOKENS
from exporter.sim.rig.state import EngineFlows
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held

TURNS_PER_SECOND = 2 / 60  # two agents, a turn a minute each
L3_WRITE_TOKENS_PER_SECOND = 2_000.0


def l3_lookups_miss(rig) -> None:
    prompt = TURNS_PER_SECOND * (SESSION_TOKENS + 500)
    rig.set_flows(EngineFlows(prompt_tokens=prompt, generation_tokens=100.0,
                              evicted_tokens=prompt, backed_up_tokens=prompt,
                              storage_written_tokens=L3_WRITE_TOKENS_PER_SECOND))
    rig.set_engine(hicache_host_used_tokens=int(L2_CAPACITY_TOKENS * 0.96))


SCENARIO = fault_held(
    "l3-miss-storm", __doc__,
    "sessions come back from L3: every lookup misses, everything is recomputed",
    l3_lookups_miss, DEFAULTS.hicache_storage_for_seconds,
    expects=(Expect("RigHiCacheStorageMisses", {"engine": "main", "severity": "warning"}),),
    must_not={"RigHiCacheThrash", "RigHiCacheHostPoolFull", "RigKVPoolSaturated"},
    heal_says="L3 fixed (or off): sessions hit L1 again",
)

"""Four agents at 65 % of a 196K context outgrow L1 and L2 and thrash.

docs/facts/rig.md#workload: each agent has a 196K context and compresses at 65 % (about 127,795
tokens); two agents at 65 % already exceed the GPU pool, four need about 511K
tokens. With HiCache size 16 the GPU pool (L1) holds 219,005 tokens and the host
pool (L2) 319,193, and L1 and L2 may hold duplicate copies, so four sessions do
not fit. Each agent's turn finds little of its session left: here 15 % comes
back from L2 and 5 % from L3 on the SSD (written through, it holds what L2
dropped, but prefetching lags the turn), the rest is recomputed at the 4-way
aggregate prefill rate (5,408 tok/s, docs/facts/rig.md#latency-and-throughput), and
every turn evicts another session from L1 into a full L2. A round of four turns
every 100 s: 5,112 prompt tokens/s, of which 767 from L2 (loaded back), 256 from L3
and none from L1; 5,112 tokens/s evicted; L2 99 % full.
The fault holds for twelve minutes; then two agents stop.

Must raise: RigHiCacheThrash{signal="churn"} (L1<->L2 churn at 767 tok/s over
the 400 tok/s threshold while L2 serves 15 % of prompt tokens, under 20 %, for
10 m), RigHiCacheThrash{signal="recompute"} (long prompts recomputed after
evictions into a full L2, for 1 m) and RigHiCacheHostPoolFull (L2 at 99 % with
evictions going on, for 5 m).
Must not raise: RigKVPoolSaturated (L1 usage 90 %), RigQueueHeadOfLine (two agents
run, the others are busy with tools, none queued), RigHiCacheStorageMisses (L3
prefetches some back: it works here), RigHostSwapping.
"""

from __future__ import annotations

from exporter.sim.rig.baseline import L2_CAPACITY_TOKENS
from exporter.sim.rig.state import EngineFlows
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held

AGENTS = 4
SESSION_AT_COMPRESSION = 127_795  # 65 % of 196,608 (docs/facts/rig.md#workload)
ROUND_SECONDS = 100.0
L2_RESTORED_SHARE = 0.15
L3_RESTORED_SHARE = 0.05


def thrash_flows() -> EngineFlows:
    prompt = AGENTS * SESSION_AT_COMPRESSION / ROUND_SECONDS
    restored, prefetched = prompt * L2_RESTORED_SHARE, prompt * L3_RESTORED_SHARE
    computed = prompt - restored - prefetched
    return EngineFlows(prompt_tokens=prompt, generation_tokens=100.0,
                       hit_tokens={"L2": restored, "L3": prefetched}, evicted_tokens=prompt,
                       loaded_back_tokens=restored, backed_up_tokens=computed,
                       storage_prefetched_tokens=prefetched, storage_written_tokens=computed)


def four_agents(rig) -> None:
    rig.set_flows(thrash_flows())
    rig.set_engine(running=2, queued=0, token_usage=0.90,
                   hicache_host_used_tokens=int(L2_CAPACITY_TOKENS * 0.99))


SCENARIO = fault_held(
    "hicache-thrash", __doc__,
    "four agents at 127,795 tokens each: L2 full, 80 % of every turn recomputed",
    four_agents,
    max(DEFAULTS.hicache_churn_for_seconds, DEFAULTS.hicache_host_pool_for_seconds),
    expects=(Expect("RigHiCacheThrash",
                    {"signal": "churn", "engine": "main", "severity": "warning"}),
             Expect("RigHiCacheThrash",
                    {"signal": "recompute", "engine": "main", "severity": "warning"}),
             Expect("RigHiCacheHostPoolFull", {"engine": "main", "severity": "warning"})),
    must_not={"RigKVPoolSaturated", "RigQueueHeadOfLine", "RigHiCacheStorageMisses",
              "RigHostSwapping"},
    heal_says="two agents stop: the sessions fit again",
)

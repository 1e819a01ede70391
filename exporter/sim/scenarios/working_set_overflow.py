"""Two agents at about 128K each outgrow a 231,914-token pool and evict each other.

docs/facts/rig.md#kv-capacity: two agents at 65 % of a 196K context hold
2 x 127,795 = 255,590 tokens, more than a 231,914-token L1 (the GPU pool of a
configuration without HiCache), so it evicts; a returning 64K session without
HiCache took 48.129 s instead of 0.546 s (#latency-and-throughput). Here the rig
runs without HiCache, and analyst and creative take turns on sessions of 126K
and more, each adding 2K tokens and reading a 300-token answer, one turn every
140 s. Each turn's prefill evicts the other's session, so every turn after
analyst's first recomputes its whole session (about 2 minutes). The rig runs the
owner's --max-consecutive-prefill-batches 1, so the recomputes cost time without
starving anyone's decode. After fifteen minutes creative compacts to 49K (25 %
of 196K): the two fit, and their next turns are served from the cache.

Must raise: RigAgentsWorkingSetOverPool (the two last prompts add up to 256K and
more for 10 min) and RigAgentRecomputing for each agent (most of its prompt tokens
uncached over 30 min, in three requests).
Must not raise: RigQueueHeadOfLine (the turns take turns), RigKVPoolSaturated (one
session at a time uses 58 % of the pool), RigDecodeStarvation and
RigDecodeStuttering (no prefill runs while the other agent decodes),
RigAgentContextNearLimit (135K is 69 % of the context), RigAgentHoggingEngine,
RigHiCacheThrash (no HiCache).
"""

from __future__ import annotations

from exporter.sim.engine.scheduler import Policy
from exporter.sim.scenarios.base import (
    DEFAULTS,
    LEAD_IN_SECONDS,
    MARGIN_SECONDS,
    Expect,
    Step,
    lead_in,
    scenario,
)

AGENTS = ("analyst", "creative")
L1_WITHOUT_HICACHE_TOKENS = 231_914  # docs/facts/rig.md#kv-capacity
SESSION_TOKENS = 126_000
TURN_INPUT_TOKENS = 2_000
ANSWER_TOKENS = 300
TURN_SECONDS = 140.0  # a cold turn of ~130K: 2.3 s a 64K admission, ~123 s prefill
#: creative's first answer (its cold prefill) makes both last prompts known.
OVER_POOL_AT = LEAD_IN_SECONDS + 127.0
HEAL_AT = OVER_POOL_AT + DEFAULTS.agent_working_set_for_seconds + MARGIN_SECONDS
COMPACTED_TOKENS = 49_000  # 25 % of 196,608 (docs/facts/rig.md#workload)
#: The owner's build with --max-consecutive-prefill-batches 1: a recompute costs
#: the returning agent two minutes without stalling anyone's decode 47 s
#: (docs/facts/rig.md#decode-starvation), so this scenario is about the pool alone.
POLICY = Policy.named("n=1")
#: After the compaction, turns served from the cache, each agent's own loop: enough
#: of them that its uncached share over 30 min falls back under half (creative's
#: compaction was one more cold prompt; analyst's first cached turn is not in the
#: window's increase, since its cached counter appears with it).
CACHED_TURNS = {"analyst": 6, "creative": 10}
CACHED_INPUT_TOKENS = 500
CACHED_ANSWER_TOKENS = 50
HEALED_SECONDS = 55.0  # the agents work on past it; this is how long the timeline watches


def rig_without_hicache(rig) -> None:
    rig.without_hicache(L1_WITHOUT_HICACHE_TOKENS)
    rig.engine.set_policy(POLICY)


def analyst_alone(rig) -> None:
    """The synthetic load gives way to the agents' (the KV they use too); analyst's
    session is in the pool from its earlier turns."""
    rig.set_engine(running=0, token_usage=0.0)
    analyst = rig.agent(AGENTS[0])
    analyst.start_session(SESSION_TOKENS)
    rig.cache_session(analyst)
    turn(rig, AGENTS[0])


def creative_returns(rig) -> None:
    rig.agent(AGENTS[1]).start_session(SESSION_TOKENS)  # evicted while it ran tools
    turn(rig, AGENTS[1])


def turn(rig, name: str, tokens: int = TURN_INPUT_TOKENS, answer: int = ANSWER_TOKENS) -> None:
    agent = rig.agent(name)
    agent.add(tokens)
    agent.send(answer)


def compacts(rig) -> None:
    """creative compacts (its session was evicted anyway: the summary is prefilled
    cold); analyst's session stayed in the pool. Both go on from the cache."""
    rig.agent(AGENTS[1]).start_session(COMPACTED_TOKENS - CACHED_INPUT_TOKENS)
    for name, turns in CACHED_TURNS.items():
        rig.agent(name).work(turns, CACHED_INPUT_TOKENS, CACHED_ANSWER_TOKENS)


def _turns() -> list[Step]:
    """The turns between creative's return and the compaction, analyst's first."""
    steps, at = [], LEAD_IN_SECONDS + TURN_SECONDS
    while at < HEAL_AT - TURN_SECONDS / 2:
        name = AGENTS[len(steps) % 2]
        steps.append(Step(at, "fault", f"{name}'s turn: its session was evicted, all of it"
                          " prefilled again", lambda rig, name=name: turn(rig, name)))
        at += TURN_SECONDS
    return steps


SCENARIO = scenario(
    "working-set-overflow", __doc__,
    (*lead_in(),
     Step(0.0, "lead-in", "a rig without HiCache: the GPU pool holds 231,914 tokens",
          rig_without_hicache),
     Step(LEAD_IN_SECONDS - 5.0, "lead-in", "analyst's turn on its cached 126K session",
          analyst_alone),
     Step(LEAD_IN_SECONDS, "fault", "creative's 126K session returns: it evicts analyst's",
          creative_returns),
     *_turns(),
     Step(HEAL_AT, "heal", "creative compacts to 49K: the two sessions fit, and their"
          " turns are served from the cache", compacts)),
    seconds=HEAL_AT + HEALED_SECONDS,
    expects=(Expect("RigAgentsWorkingSetOverPool", {"engine": "main", "severity": "warning"}),
             *(Expect("RigAgentRecomputing", {"engine": "main", "agent": name,
                                              "severity": "warning"}) for name in AGENTS)),
    must_not={"RigQueueHeadOfLine", "RigKVPoolSaturated", "RigDecodeStarvation",
              "RigDecodeStuttering", "RigAgentContextNearLimit", "RigAgentHoggingEngine",
              "RigHiCacheThrash"},
    heal_at=HEAL_AT,
)

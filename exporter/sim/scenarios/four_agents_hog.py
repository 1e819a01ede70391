"""One agent's unbounded answer holds the engine while three agents wait.

docs/facts/rig.md#workload and #kv-capacity: with four agents, three waited 49
minutes in all while one held the pool; that agent's session grew from 123K to the
196K limit with a single 70K-token output, and one agent had no max_tokens. Here
the four are the rig's agents on the tap. analyst sends its cached 123K session
with no token limit (the chat API then allows up to the 196,608-token context,
about 73K tokens more) and decodes alone at 62-88 tok/s; its context grows in
the 219,005-token pool. Five minutes in, creative, monitor and wsl send fresh 80K
prompts: none fits beside analyst's 145K, so they wait in the queue for their
first token (and the stream probe waits behind them). When analyst's request has
run 10 minutes (about 42K tokens, on its way to 70K), the owner stops it and
restarts the agents.

Must raise: RigAgentHoggingEngine (analyst's request has run 10 min while the
others have waited 2 min for a first token) and RigAgentRunawayOutput, first
signal="unbounded" (an answer without max_tokens past 4,096 tokens, a quarter of
16,384, after about a minute), then signal="size" (past 16,384, after about four),
and RigQueueHeadOfLine (three requests queued while one runs, for 5 min): the
page the owner had, which now comes with the hog's name.
Must not raise: RigEngineWedged (the probe waits behind the three, and one probe
times out, which the overview's Engines tile shows; the rule wants 5 min of failures),
RigDecodeStarvation (analyst decodes steadily), RigKVPoolSaturated (analyst's 165K
is 75 % of the pool), RigAgentContextNearLimit (analyst sent 123K, 63 % of the
context), RigAgentsWorkingSetOverPool (L1 + L2 hold the four sessions).
"""

from __future__ import annotations

from exporter.sim.scenarios.base import (
    DEFAULTS,
    LEAD_IN_SECONDS,
    MARGIN_SECONDS,
    Expect,
    Step,
    lead_in,
    scenario,
)

HOG = "analyst"
WAITERS = ("creative", "monitor", "wsl")
HOG_SESSION_TOKENS = 123_000  # docs/facts/rig.md#workload: from about 123K
#: Fresh prompts that do not fit beside the hog (219,005 - 123K - its answer so far:
#: 74K free when they come); 74K x 3 and 80K x 3 serialised on the rig.
WAITER_PROMPT_TOKENS = 80_000
WAITER_MAX_TOKENS = 400
WAITERS_AT = LEAD_IN_SECONDS + DEFAULTS.queue_wait_seconds
HOGGING_AT = LEAD_IN_SECONDS + DEFAULTS.agent_hog_running_seconds
HEAL_AT = HOGGING_AT + MARGIN_SECONDS - 15.0


def hog_answers(rig) -> None:
    """The synthetic load gives way to the agents' (the KV they use too)."""
    rig.set_engine(running=0, token_usage=0.0)
    hog = rig.agent(HOG)
    hog.start_session(HOG_SESSION_TOKENS - 1)
    rig.cache_session(hog)
    hog.add(1)
    hog.send(None)


def others_ask(rig) -> None:
    for name in WAITERS:
        agent = rig.agent(name)
        agent.start_session(WAITER_PROMPT_TOKENS)
        agent.send(WAITER_MAX_TOKENS)


SCENARIO = scenario(
    "four-agents-hog", __doc__,
    (*lead_in(),
     Step(LEAD_IN_SECONDS, "fault",
          f"{HOG} sends its 123K session with no max_tokens: an answer without end",
          hog_answers),
     Step(WAITERS_AT, "fault",
          f"{', '.join(WAITERS)} send fresh 80K prompts: none fits beside {HOG}",
          others_ask),
     Step(HEAL_AT, "heal", f"the owner stops {HOG}'s answer and restarts the agents",
          lambda rig: rig.heal())),
    seconds=HEAL_AT + MARGIN_SECONDS,
    expects=(Expect("RigAgentHoggingEngine", {"engine": "main", "agent": HOG,
                                              "severity": "warning"}),
             *(Expect("RigAgentRunawayOutput", {"engine": "main", "agent": HOG,
                                                "signal": signal, "severity": "warning"})
               for signal in ("unbounded", "size")),
             Expect("RigQueueHeadOfLine", {"engine": "main", "severity": "warning"})),
    must_not={"RigEngineWedged", "RigDecodeStarvation",
              "RigKVPoolSaturated", "RigAgentContextNearLimit",
              "RigAgentsWorkingSetOverPool"},
    heal_at=HEAL_AT,
)

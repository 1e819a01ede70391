"""Agent creative's fresh 64K prefill stops agent analyst's decode for 47 s.

docs/facts/rig.md#decode-starvation (the defining failure): agent A decodes with a
64K context; five seconds later agent B sends a fresh 64K prefill. With the
default scheduler (max-consecutive-prefill-batches N=0) A's longest decode gap
was 47.23 s and B's time to first token 49.43 s. Here both are the rig's agents
talking through the stream tap: analyst (A) streams from its cached 64K session
from 55 s, creative (B) sends a cold 64K prompt at 60 s, and the scheduler model
does the rest: it prefills B's chunks back to back while A waits (about 47 s),
B's first token comes about 49 s after it sent, then both decode. Prefill
compresses like a stall here (`SimRig.prefills_stall`), so at a stall scale of 2
the gap lasts 23.6 s as `pause_decode`'s would, and the fault lasts longer in
the rig's seconds than at scale 1. The tap blames the gap on creative: its
request waited for its first token all through it.

Must raise: RigDecodeStarvation (critical): the stall tracker's and the tap's
longest stall in the last 60 s reach 10 s at about 70 s, and the rule fires at
the next evaluation, while the stall goes on.
Must not raise: RigDecodeStuttering (one stall over 10 s is starvation, not the
2-10 s stutter), RigEngineWedged (either signal) and RigQueueHeadOfLine (a
request keeps running, nothing waits in the queue),
RigKVPoolSaturated (two 64K sessions use 60 % of the pool),
RigAgentHoggingEngine (analyst's request runs minutes, not 10), RigAgentRecomputing
(one cold prompt, not several).
"""

from __future__ import annotations

from exporter.sim.rig.baseline import SESSION_TOKENS
from exporter.sim.scenarios.base import LEAD_IN_SECONDS, Expect, Step, lead_in, scenario

A, B = "analyst", "creative"
A_ALONE_AT = LEAD_IN_SECONDS - 5.0
DECODE_GAP_SECONDS = 47.23  # A's longest gap, default scheduler (docs/facts/rig.md)
B_TTFT_SECONDS = 49.43  # B's time to first token (docs/facts/rig.md)
#: How much longer than at scale 1 the fault lasts in rig seconds: prefill stretched
#: by the rig's time scale over its stall scale, 10 / 2 in the end-to-end tests and
#: the demo at its default speed.
MAX_STRETCH = 5.0
A_TOKENS = 4000  # A decodes ~1,500 before B's prefill starts (B's admission: 2.3 s)
B_TOKENS = 1000
NEW_INPUT_TOKENS = 1


def agent_a_alone(rig) -> None:
    """The synthetic decode gives way to analyst's real stream (the KV it uses too)."""
    rig.set_engine(running=0, token_usage=0.0)
    a = rig.agent(A)
    a.start_session(SESSION_TOKENS - NEW_INPUT_TOKENS)
    rig.cache_session(a)
    a.add(NEW_INPUT_TOKENS)
    a.send(A_TOKENS)


def b_prefills(rig) -> None:
    rig.prefills_stall()
    b = rig.agent(B)
    b.start_session(SESSION_TOKENS)  # cold: no tier holds any of it
    b.send(B_TOKENS)


SCENARIO = scenario(
    "prefill-starves-decode", __doc__,
    (*lead_in(),
     Step(A_ALONE_AT, "lead-in", f"agent {A} decodes alone from its cached 64K session",
          agent_a_alone),
     Step(LEAD_IN_SECONDS, "fault",
          f"agent {B}'s fresh 64K prefill: {A}'s decode stops for about "
          f"{DECODE_GAP_SECONDS} s", b_prefills)),
    seconds=LEAD_IN_SECONDS + MAX_STRETCH * B_TTFT_SECONDS + 90.0,
    expects=(Expect("RigDecodeStarvation", {"engine": "main", "severity": "critical"}),),
    must_not={"RigDecodeStuttering", "RigEngineWedged", "RigQueueHeadOfLine",
              "RigKVPoolSaturated"},
)

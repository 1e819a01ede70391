"""A fresh 64K prefill stops another agent's decode for 47 s.

docs/facts/rig.md#decode-starvation (the defining failure): agent A decodes with a
64K context; five seconds later agent B sends a fresh 64K prefill. With the
default scheduler (max-consecutive-prefill-batches N=0) A's longest decode gap
was 47.23 s and B's time to first token 49.43 s. Here A decodes alone from
55 s, B's prefill arrives at 60 s, decode stands still for 47.23 s while A stays
running, and B's first token comes at 109.43 s, after which both decode.

Must raise: RigDecodeStarvation (critical): the stall tracker's
longest stall in the last 60 s reaches 10 s at 70 s, and the rule fires at the
next evaluation, while the stall goes on.
Must not raise: RigDecodeStuttering (one stall over 10 s is starvation, not the
2-10 s stutter), RigEngineWedged (either signal) and RigQueueHeadOfLine (a
request keeps running, nothing waits in the queue),
RigKVPoolSaturated (two 64K sessions use 60 % of the pool).
"""

from __future__ import annotations

from exporter.sim.rig.baseline import SESSION_TOKENS
from exporter.sim.scenarios.base import LEAD_IN_SECONDS, Expect, Step, lead_in, scenario

A_ALONE_AT = LEAD_IN_SECONDS - 5.0
DECODE_GAP_SECONDS = 47.23  # A's longest gap, default scheduler (docs/facts/rig.md)
B_TTFT_SECONDS = 49.43  # B's time to first token (docs/facts/rig.md)
FIRST_TOKEN_AT = LEAD_IN_SECONDS + B_TTFT_SECONDS


def agent_a_alone(rig) -> None:
    rig.set_engine(running=1)


def b_prefills(rig) -> None:
    rig.pause_decode(DECODE_GAP_SECONDS)


def b_first_token(rig) -> None:
    rig.engine.finish_request(SESSION_TOKENS, 1)  # cold: no tier held any of it
    rig.set_engine(running=2)


SCENARIO = scenario(
    "prefill-starves-decode", __doc__,
    (*lead_in(),
     Step(A_ALONE_AT, "lead-in", "agent A decodes alone with a 64K context", agent_a_alone),
     Step(LEAD_IN_SECONDS, "fault",
          f"agent B's fresh 64K prefill: A's decode stops for {DECODE_GAP_SECONDS} s",
          b_prefills),
     Step(FIRST_TOKEN_AT, "heal",
          f"B's first token after {B_TTFT_SECONDS} s; A decodes again", b_first_token)),
    seconds=FIRST_TOKEN_AT + 90.0,
    expects=(Expect("RigDecodeStarvation", {"engine": "main", "severity": "critical"}),),
    must_not={"RigDecodeStuttering", "RigEngineWedged", "RigQueueHeadOfLine",
              "RigKVPoolSaturated"},
    heal_at=FIRST_TOKEN_AT,
)

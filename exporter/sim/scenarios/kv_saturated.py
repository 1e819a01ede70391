"""Three long sessions fill the KV pool and the scheduler retracts requests.

docs/facts/rig.md#kv-capacity, concurrency limits: 114K x 2 and 120K x 2 fit, but 74K x 3 and
80K x 3 started to serialise; the GPU pool holds 219,005 tokens with HiCache
size 16. Three agents at about 72K each fill it: usage 98.5 %, and the scheduler
retracts a decoding request for lack of KV space every 90 s (it re-admits it at
once, so nothing waits in the queue). Seven minutes.

Must raise: RigKVPoolSaturated{signal="usage"} (usage at 95 % or more for 5 m)
and RigKVPoolSaturated{signal="retractions"} (any retraction in the last 5 m).
Must not raise: RigQueueHeadOfLine (queue empty), RigDecodeStarvation (decode
goes on), RigHiCacheHostPoolFull.
"""

from __future__ import annotations

from exporter.sim.scenarios.base import (
    DEFAULTS,
    LEAD_IN_SECONDS,
    MARGIN_SECONDS,
    Expect,
    Step,
    every,
    heal,
    lead_in,
    scenario,
)

HEAL_AT = LEAD_IN_SECONDS + DEFAULTS.kv_saturated_for_seconds + MARGIN_SECONDS
RETRACT_EVERY_SECONDS = 90.0


def three_sessions(rig) -> None:
    rig.set_engine(running=3, queued=0, token_usage=0.985)


def retract_one(rig) -> None:
    rig.retract(1)


SCENARIO = scenario(
    "kv-saturated", __doc__,
    (*lead_in(),
     Step(LEAD_IN_SECONDS, "fault", "three 72K sessions: KV pool 98.5 % full", three_sessions),
     *every(LEAD_IN_SECONDS + 30.0, HEAL_AT, RETRACT_EVERY_SECONDS, "fault",
            "a decoding request is retracted for KV space", retract_one),
     heal(HEAL_AT, "one agent finishes: the pool has room")),
    seconds=HEAL_AT + MARGIN_SECONDS,
    expects=(Expect("RigKVPoolSaturated", {"signal": "usage", "engine": "main",
                                           "severity": "warning"}),
             Expect("RigKVPoolSaturated", {"signal": "retractions", "engine": "main",
                                           "severity": "warning"})),
    must_not={"RigQueueHeadOfLine", "RigDecodeStarvation", "RigHiCacheHostPoolFull"},
    heal_at=HEAL_AT,
)

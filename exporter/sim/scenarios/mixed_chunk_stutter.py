"""Decode pauses for about 4 s at every fresh long prefill (--enable-mixed-chunk).

docs/facts/rig.md#decode-starvation, the table: with --enable-mixed-chunk the decoding
agent's longest gap during another agent's fresh 64K prefill was 3.997 s (and
4.04 s with max-consecutive-prefill-batches N=1). Agents compact their sessions
at 65 % and re-prefill, so on a busy rig such prefills come often: here one a
minute for eight minutes, each pausing decode for 3.997 s.

Must raise: RigDecodeStuttering (warning): stalls of 2-10 s in three or more
separate minutes of the last ten (the rule holds nothing on top).
Must not raise: RigDecodeStarvation (no stall reaches 10 s), RigEngineWedged,
RigQueueHeadOfLine.
"""

from __future__ import annotations

from exporter.sim.scenarios.base import (
    DEFAULTS,
    LEAD_IN_SECONDS,
    MARGIN_SECONDS,
    Expect,
    every,
    heal,
    lead_in,
    scenario,
)

PAUSE_SECONDS = 3.997  # --enable-mixed-chunk's longest gap (docs/facts/rig.md)
PREFILL_PERIOD_SECONDS = 60.0
PREFILLS = 8
HEAL_AT = LEAD_IN_SECONDS + PREFILLS * PREFILL_PERIOD_SECONDS


def prefill_chunk_pause(rig) -> None:
    rig.pause_decode(PAUSE_SECONDS)


SCENARIO = scenario(
    "mixed-chunk-stutter", __doc__,
    (*lead_in(),
     *every(LEAD_IN_SECONDS, HEAL_AT, PREFILL_PERIOD_SECONDS, "fault",
            f"a fresh 64K prefill: decode pauses {PAUSE_SECONDS} s", prefill_chunk_pause),
     heal(HEAL_AT, "no more fresh prefills")),
    seconds=HEAL_AT + DEFAULTS.decode_stutter_for_seconds + MARGIN_SECONDS,
    expects=(Expect("RigDecodeStuttering", {"engine": "main", "severity": "warning"}),),
    must_not={"RigDecodeStarvation", "RigEngineWedged", "RigQueueHeadOfLine"},
    heal_at=HEAL_AT,
)

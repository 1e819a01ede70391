"""One agent occupies the pool while three wait in the queue.

docs/facts/rig.md#kv-capacity: with 4 agents, three of them stalled for a combined 49 minutes while
one agent occupied the pool; one agent's session grew from 123K to 196K with a
single 70K-token output, and one had no max_tokens limit. Here that agent's
196K session (90 % of the 219,005-token pool) decodes alone at single-stream
speed (88.8 tok/s, docs/facts/rig.md#latency-and-throughput) while three requests
wait. The real event lasted about 16 minutes per agent; the scenario holds seven,
enough for the rule.

Must raise: RigQueueHeadOfLine (requests queued while another runs, for 5 m).
Must not raise: RigDecodeStarvation (the hog decodes steadily), RigEngineWedged
(a request runs and the probe's turn comes), RigKVPoolSaturated (90 % is under
95 %).
"""

from __future__ import annotations

from exporter.sim.rig.state import EngineFlows
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held

SINGLE_STREAM_DECODE_TOKENS_PER_SECOND = 88.8  # 64K single stream (docs/facts/rig.md)


def one_agent_hogs(rig) -> None:
    rig.set_flows(EngineFlows(generation_tokens=SINGLE_STREAM_DECODE_TOKENS_PER_SECOND))
    rig.set_engine(running=1, queued=3, token_usage=0.90)


SCENARIO = fault_held(
    "queue-hog", __doc__,
    "one 196K session decodes a 70K-token answer; three agents wait", one_agent_hogs,
    DEFAULTS.queue_wait_seconds,
    expects=(Expect("RigQueueHeadOfLine", {"engine": "main", "severity": "warning"}),),
    must_not={"RigDecodeStarvation", "RigEngineWedged", "RigKVPoolSaturated"},
    heal_says="the long answer ends: the queue drains",
)

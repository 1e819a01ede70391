"""The scheduler hangs: /metrics and /health answer, no request is served.

docs/metrics.md#stream-probe: the stream probe answers "can the engine serve at all", which matters
when the engine is wedged but /health says 200; the rules cite vllm#46811, where
running requests read 0 during a real hang. Here the scheduler stops: nothing
runs, three agents' requests sit in the queue, no decode batch happens, and a
/generate is accepted but never sends a token, so every probe times out. The
first probe fails a probe interval and a deadline after the hang (60 + 60 s, or
up to 60 + 300 s of scenario time where the probe's deadline compresses 5-fold
less than the scenario, as in the end-to-end tests and the demo); then the rule
holds 5 minutes. Fourteen minutes in all, then the engine is restarted.

Must raise: RigEngineWedged{signal="probe"} (the probe fails while /metrics
answers, for 5 m). The rig's exporter runs a probe, so the rule's queue signal
(queued, nothing running, no decode batch) stands down for it: one fault, one page.
Must not raise: RigEngineWedged{signal="queue"}, RigEngineDown (the HTTP server
answers), RigDecodeStarvation (nothing runs, and the probe never got a first
token, so it has no gap), RigQueueHeadOfLine (nothing runs).
"""

from __future__ import annotations

from exporter.sim.rig.state import EngineFlows
from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held

# The probe's interval and its deadline at up to 5-fold less compression (scenario s).
FIRST_PROBE_FAILS_WITHIN = 60.0 + 300.0


def scheduler_hangs(rig) -> None:
    rig.wedge_scheduler()
    rig.set_flows(EngineFlows())
    rig.set_engine(running=0, queued=3)


async def engine_restarted(rig) -> None:
    await rig.engine_down()
    await rig.engine_up()
    rig.heal()


SCENARIO = fault_held(
    "engine-wedged", __doc__,
    "the scheduler hangs: 3 queued, none running, /generate sends nothing", scheduler_hangs,
    FIRST_PROBE_FAILS_WITHIN + DEFAULTS.engine_wedged_seconds,
    expects=(Expect("RigEngineWedged", {"signal": "probe", "engine": "main",
                                        "severity": "critical"}),),
    must_not={"RigEngineDown", "RigQueueHeadOfLine", "RigDecodeStarvation"},
    heal_says="the engine is restarted", heal_act=engine_restarted,
)

"""The engine process is gone: its port refuses connections.

RigEngineDown (docs/alerts.md): the engine is unreachable. On the rig this is SGLang
killed (the OOM killer with L2 taking ~40 GB of 64 GB, docs/facts/rig.md#kv-capacity) or crashed;
loading a 27B model on TP=2 and capturing graphs takes minutes, so the rule
waits 5 m. Here the server stops for seven minutes and then comes back with
its counters restarted.

Must raise: RigEngineDown{engine="main"} (rig_source_up of engine/main at 0 for 5 m).
Must not raise: RigEngineWedged (it needs the engine to answer HTTP),
RigDecodeStarvation (an unreachable engine is not a stall),
RigExporterSourceDown (engine sources are RigEngineDown's; the probe source
stays up and reports probe_success 0).
"""

from __future__ import annotations

from exporter.sim.scenarios.base import DEFAULTS, Expect, fault_held


async def engine_dies(rig) -> None:
    await rig.engine_down()


async def engine_restarts(rig) -> None:
    await rig.engine_up()
    rig.heal()


SCENARIO = fault_held(
    "engine-down", __doc__, "SGLang is killed: its port refuses connections", engine_dies,
    DEFAULTS.engine_down_for_seconds,
    expects=(Expect("RigEngineDown", {"engine": "main", "severity": "critical"}),),
    must_not={"RigEngineWedged", "RigDecodeStarvation", "RigExporterSourceDown"},
    heal_says="SGLang restarts on the same port, counters from zero", heal_act=engine_restarts,
)

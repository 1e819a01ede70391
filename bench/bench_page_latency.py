"""From a stall's start to its page, at real time with the deployed intervals: the
simulated rig plays prefill-starves-decode (a 47.23 s starvation) uncompressed, a real
exporter reads it, and Prometheus scrapes the rig's job and evaluates the rules at
deploy/prometheus.yml's intervals, with the committed rules and alerts/alertmanager.yml's
routing (nothing time-scaled). It prints, per run, the seconds from the fault (the
prefill that stops decode) to the RigDecodeStarvation page, and every other page that
came (a false page), then the worst case the configuration allows.

    python3 bench/bench_page_latency.py [--runs 2]

Each run takes about two minutes: the scenario's one-minute healthy lead-in, then the
stall until its page.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.timescale import seconds  # noqa: E402
from exporter.process.launch import start_exporter, stop_together  # noqa: E402
from exporter.rigctl.stack import Intervals, Monitoring, WebhookReceiver  # noqa: E402
from exporter.sim.rig.simrig import SimRig  # noqa: E402
from exporter.sim.scenarios import SCENARIOS  # noqa: E402
from exporter.sim.scenarios.player import play  # noqa: E402
from exporter.thresholds import Thresholds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "prefill-starves-decode"
PAGE_WAIT_SECONDS = 90.0


def deployed_intervals() -> Intervals:
    return Intervals.of_job(yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text()))


def critical_group_wait() -> float:
    config = yaml.safe_load((ROOT / "alerts" / "alertmanager.yml").read_text())
    pager = next(r for r in config["route"]["routes"] if r["receiver"] == "rig-pager")
    return seconds(pager["group_wait"])


def worst_case_seconds(intervals: Intervals) -> float:
    """The stall reaches the line, then waits at most one scrape, one evaluation and
    the critical route's group_wait (the tracker's poll is well under a second)."""
    return (Thresholds().decode_stall_critical_seconds + seconds(intervals.scrape)
            + seconds(intervals.evaluation) + critical_group_wait())


async def one_run(intervals: Intervals, workdir: Path) -> tuple[float | None, list[str]]:
    fault_at: list[float] = []

    def said(line: str) -> None:
        if "] fault:" in line and not fault_at:
            fault_at.append(time.monotonic())

    receiver = WebhookReceiver()
    rig = SimRig(1.0, directory=workdir / "rig", say=said)
    await rig.start()
    await receiver.start()
    exporter = start_exporter(rig.exporter_args(), workdir / "rig", wait=False)
    monitoring = Monitoring(workdir / "monitoring", 1.0, receiver.url, intervals=intervals)
    try:
        await asyncio.to_thread(exporter.wait_ready)
        monitoring.launch()
        await asyncio.to_thread(monitoring.wait_ready)
        monitoring.write_targets([("bench", exporter.address)])
        scenario = SCENARIOS[SCENARIO]
        playing = asyncio.create_task(play(rig, scenario))
        deadline = time.monotonic() + scenario.steps[-1].at + PAGE_WAIT_SECONDS
        page = None
        while page is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            page = next((n for n in receiver.notifications if n.path == "/page"
                         and any(a["labels"]["alertname"] == "RigDecodeStarvation"
                                 and a["status"] == "firing"
                                 for a in n.payload["alerts"])), None)
        playing.cancel()
        others = sorted({a["labels"]["alertname"] for n in receiver.notifications
                         if n.path == "/page" for a in n.payload["alerts"]}
                        - {"RigDecodeStarvation"})
        latency = page.arrived - fault_at[0] if page is not None and fault_at else None
        return latency, others
    finally:
        rig.agents and rig.agents.hang_up()
        await stop_together([exporter, *monitoring.processes], 2.0)
        await receiver.stop()
        await rig.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    intervals = deployed_intervals()
    print(f"scrape {intervals.scrape}, evaluation {intervals.evaluation}, critical"
          f" group_wait {critical_group_wait():g} s: worst case"
          f" {worst_case_seconds(intervals):g} s from the stall's start")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            latency, others = asyncio.run(one_run(intervals, Path(tmp)))
        shown = "no page" if latency is None else f"{latency:.1f} s"
        print(f"run {run + 1}: page {shown} after the stall's start;"
              f" other pages: {', '.join(others) or 'none'}", flush=True)


if __name__ == "__main__":
    main()

"""A day of the stall tracker's gauges with one 47 s stall (docs/facts/rig.md), and of
the tap's per-agent maxima with one agent holding the engine, in a real Prometheus,
and each panel rendered over it as Grafana would query it: for the aliasing test
(tests/dashboards/test_aliasing.py) and its before/after figures
(bench/bench_dashboard_aliasing.py).

The day is written as OpenMetrics at a 15 s scrape interval and turned into
TSDB blocks by promtool; Prometheus serves them read from disk.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exporter.process.launch import Process, free_port, wait_ready
from exporter.thresholds import Thresholds
from rigdev.grafana_query import Request, request

# The coarser case: deploy/prometheus.yml scraped every 15 s before the rig's job went
# to 5 s; Grafana's step is never under it (the data source's timeInterval).
SCRAPE_SECONDS = 15.0
STALL_SECONDS = 47.23  # docs/facts/rig.md#decode-starvation
RESOLUTION_SECONDS = 0.5  # the tracker's poll: the stall is known to within it
HOURS = 25
RANGES = {"1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600}
# Grafana rounds a render's start and end to multiples of its step, so where a stall
# falls in the step grid is fixed by its time: RENDERS rigs stall, each at another
# phase of the longest step (15 min: 24 h at grafanalib's 100 points), and each render
# selects one rig, as the dashboard's `rig` variable does.
RENDERS = 8
PHASE_SECONDS = 900 / RENDERS
STALL_FAMILIES = ("rig_engine_decode_stall_seconds", "rig_engine_decode_stall_max_seconds")
CRITICAL = Thresholds().decode_stall_critical_seconds
WINDOW = Thresholds().decode_stall_window_seconds
# The tap's longest gap covers its last minute (exporter/daemon/tap/tally.py).
TAP_GAP_WINDOW_SECONDS = 60.0
# The agents' events, each a minute past its line: analyst's answer runs 11 min at
# 70 tok/s (docs/facts/rig.md#workload: 62-88 tok/s alone), creative waits 3 min for
# its first token, and analyst's stream stands still for the 47 s stall.
HOG_SECONDS = Thresholds().agent_hog_running_seconds + 60.0
WAIT_SECONDS = Thresholds().agent_hog_waiting_seconds + 60.0
HOG_TOKENS_PER_SECOND = 70.0
#: Each agents' gauge of a maximum: the agent it is drawn for and the line its event
#: must reach on every render.
AGENT_MAXIMA = {
    "rig_agent_max_token_gap_seconds": ("analyst", CRITICAL),
    "rig_agent_longest_request_seconds": ("analyst", Thresholds().agent_hog_running_seconds),
    "rig_agent_longest_first_token_wait_seconds": ("creative",
                                                   Thresholds().agent_hog_waiting_seconds),
    "rig_agent_response_tokens_max": ("analyst", Thresholds().agent_runaway_tokens),
    "rig_agent_unbounded_response_tokens_max": ("analyst", Thresholds().agent_runaway_tokens),
}


def _gauges(t: float, stall_at: float) -> dict[str, float]:
    """The tracker's gauges at `t`, for one stall from `stall_at`: the stall under way,
    and the longest in the last window (its bounds 2 polls apart)."""
    into = t - stall_at
    under_way = into if 0 <= into < STALL_SECONDS else 0.0
    longest = min(into, STALL_SECONDS) if 0 <= into < STALL_SECONDS + WINDOW else 0.0
    return {
        "rig_engine_decode_stall_seconds": under_way,
        "rig_engine_decode_stall_upper_seconds": under_way and under_way + RESOLUTION_SECONDS,
        "rig_engine_decode_stall_max_seconds": longest,
        "rig_engine_decode_stall_max_upper_seconds": longest and longest + RESOLUTION_SECONDS,
    }


def _agent_gauges(t: float, event_at: float) -> dict[str, float]:
    """The tap's per-agent maxima at `t`, for the events above from `event_at`."""
    into = t - event_at
    gap = min(into, STALL_SECONDS) if 0 <= into < STALL_SECONDS + TAP_GAP_WINDOW_SECONDS else 0.0
    running = into if 0 <= into < HOG_SECONDS else 0.0
    return {
        "rig_agent_max_token_gap_seconds": gap,
        "rig_agent_longest_request_seconds": running,
        "rig_agent_longest_first_token_wait_seconds": into if 0 <= into < WAIT_SECONDS else 0.0,
        "rig_agent_response_tokens_max": running * HOG_TOKENS_PER_SECOND,
        "rig_agent_unbounded_response_tokens_max": running * HOG_TOKENS_PER_SECOND,
    }


def _openmetrics(start: float, stall_at: float) -> str:
    samples: dict[str, list[str]] = {}
    t = start
    while t < start + HOURS * 3600:
        for i in range(RENDERS):
            labels = f'job="rig",instance="rig:9464",rig="r{i}",engine="main",kind="sglang"'
            for name, value in _gauges(t, stall_at + i * PHASE_SECONDS).items():
                samples.setdefault(name, []).append(f"{name}{{{labels}}} {value} {t:.3f}")
            for name, value in _agent_gauges(t, stall_at + i * PHASE_SECONDS).items():
                agent = f'{labels},agent="{AGENT_MAXIMA[name][0]}"'
                samples.setdefault(name, []).append(f"{name}{{{agent}}} {value} {t:.3f}")
        t += SCRAPE_SECONDS
    lines = []
    for name, rows in samples.items():
        lines += [f"# TYPE {name} gauge", *rows]
    return "\n".join([*lines, "# EOF", ""])


class Prometheus:
    def __init__(self, url: str, stall_at: float) -> None:
        self.url = url
        self.stall_at = stall_at

    def values(self, req: Request) -> list[float]:
        if req.step is None:
            path, params = "query", {"query": req.expr, "time": f"{req.end:.3f}"}
        else:
            path, params = "query_range", {"query": req.expr, "start": f"{req.start:.3f}",
                                           "end": f"{req.end:.3f}", "step": f"{req.step:g}"}
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result = body["data"]["result"]
        points = [s["value"] for s in result] if req.step is None else [
            v for s in result for v in s["values"]]
        return [float(v) for _, v in points]


@contextlib.contextmanager
def stall_day(tmp: Path) -> Iterator[Prometheus]:
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "prometheus and promtool: apt-get install prometheus"
    # A day ending an hour ago, aligned to the hour: within retention, off the head.
    end = (int(time.time()) // 3600 - 1) * 3600
    start = end - HOURS * 3600
    stall_at = end - 2 * 3600 + 7.0  # not on a round step
    (tmp / "stall.om").write_text(_openmetrics(start, stall_at))
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q",
                    str(tmp / "stall.om"), str(tmp / "tsdb")], check=True, timeout=60)
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    address = f"127.0.0.1:{free_port()}"
    with Process("prometheus", [
            binary, f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}", "--storage.tsdb.retention.time=30d",
            f"--web.listen-address={address}", "--log.level=warn"],
            tmp / "prometheus.log") as process:
        wait_ready(f"http://{address}/-/ready", process, timeout=60)
        yield Prometheus(f"http://{address}", stall_at)


def renders(prometheus: Prometheus, panel: dict[str, Any], seconds: int) -> list[float]:
    """The panel's highest value in the render of a `seconds` range around each rig's
    stall (one render per phase of the stall in the step grid)."""
    points = panel.get("maxDataPoints", 100)
    end = prometheus.stall_at + seconds / 2
    highest = []
    for i in range(RENDERS):
        values = [v for t in panel["targets"] for v in prometheus.values(
            request(t, points, end - seconds, end, SCRAPE_SECONDS, {"rig": f"r{i}"}))]
        highest.append(max(values, default=0.0))
    return highest


def stall_panels(dashboards: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The decode and overview panels that draw the stall tracker, by title."""
    return {f"{d['title']} › {p['title']}": p
            for d in dashboards if d["uid"] in ("rig-decode", "rig-overview")
            for p in _panels(d)
            if any(f in t.get("expr", "") for t in p.get("targets", [])
                   for f in STALL_FAMILIES)}


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def agent_maxima(dashboards: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], float]]:
    """Each query of the agents dashboard that draws a gauge of a maximum, by
    "panel › family", as a panel of that query alone, with the line it must reach."""
    found = {}
    for d in dashboards:
        if d["uid"] != "rig-agents":
            continue
        for p in _panels(d):
            for t in p.get("targets", []):
                for family, (_, line) in AGENT_MAXIMA.items():
                    if re.search(rf"\b{family}\b", t.get("expr", "")):
                        found[f"{p['title']} › {family}"] = ({**p, "targets": [t]}, line)
    return found

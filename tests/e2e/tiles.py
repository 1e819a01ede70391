"""The overview's tiles as Grafana would colour them over a time-scaled run
(tests/e2e/test_scenarios.py): the dashboard is generated from the same scaled
thresholds as the run's rules, its rule windows are scaled as theirs are
(alerts/timescale.py), and each tile's instant queries run over the whole run for
one rig."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from alerts.timescale import scaled_expr, scaled_thresholds
from dashboards.generate import build, sources
from exporter.thresholds import Thresholds
from rigdev.grafana_query import color_of, request, steps_of
from tests.dashboards.queries import alerts_shown, panels

# Every tile is green while its condition does not hold (dashboards/panels.py steps).
HEALTHY = "green"


@dataclass(frozen=True)
class Tile:
    title: str
    shows: frozenset[str]  # the alerts its description names
    crossed: tuple[str, ...]  # "legend = value (colour)" of each series past a threshold
    values: tuple[str, ...]  # every series, for the failure message


def overview(time_scale: float, stall_scale: float) -> dict[str, Any]:
    source = next(s for s in sources() if s.name == "overview.dashboard.py")
    return build(source, scaled_thresholds(Thresholds(), time_scale, stall_scale))


def instant(prometheus_url: str, expr: str, at: float) -> list[dict[str, Any]]:
    """An instant query's result at `at` (Unix seconds)."""
    query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?{query}", timeout=30) as reply:
        body = json.load(reply)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _legend(template: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def tiles(dashboard: dict[str, Any], prometheus_url: str, rig: str, start: float, end: float,
          time_scale: float, scrape_seconds: float) -> list[Tile]:
    out = []
    for panel in panels(dashboard):
        if panel["type"] != "stat":
            continue
        crossed, values = [], []
        for target in panel["targets"]:
            scaled = dict(target, expr=scaled_expr(target["expr"], time_scale))
            req = request(scaled, panel.get("maxDataPoints", 100), start, end, scrape_seconds,
                          {"rig": rig})
            steps = steps_of(panel, target["refId"])
            for series in instant(prometheus_url, req.expr, req.end):
                value = float(series["value"][1])
                color = color_of(value, steps)
                row = f"{_legend(target['legendFormat'], series['metric'])} = {value:g} ({color})"
                values.append(row)
                if color != HEALTHY:
                    crossed.append(row)
        out.append(Tile(panel["title"], frozenset(alerts_shown(panel)), tuple(crossed),
                        tuple(values)))
    return out

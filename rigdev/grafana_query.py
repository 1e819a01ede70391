"""What Grafana sends Prometheus for a panel's query, for the tests and the renderer
(Grafana itself cannot run here; docs/dashboards.md#how-grafana-picks-the-step).

As Grafana's Prometheus data source does (grafana/grafana pkg/promlib/models/query.go,
and the interval calculator's RoundInterval in grafana-plugin-sdk-go's gtime):

- the interval is the time range over the panel's maxDataPoints, at least the data
  source's `timeInterval` (the scrape interval), rounded down to a round value
  (36 s to 30 s, 216 s to 5 min);
- the step of a range query is that interval; start and end are rounded down to a
  multiple of it;
- `$__interval` is the interval, `$__rate_interval` the larger of interval + scrape
  interval and four scrape intervals, `$__range` the time range in whole seconds;
- an instant query is evaluated at the end of the range.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# (up to this interval, round to this), seconds: RoundInterval's table.
_ROUNDING = (
    (0.015, 0.01), (0.035, 0.02), (0.075, 0.05), (0.15, 0.1), (0.35, 0.2), (0.75, 0.5),
    (1.5, 1), (3.5, 2), (7.5, 5), (12.5, 10), (17.5, 15), (25, 20), (45, 30), (90, 60),
    (210, 120), (450, 300), (750, 600), (1050, 900), (1500, 1200), (2700, 1800),
    (5400, 3600), (9000, 7200), (16200, 10800), (32400, 21600), (86400, 43200),
    (172800, 86400),
)
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def round_interval(seconds: float) -> float:
    return next((to for upto, to in _ROUNDING if seconds <= upto), 86400.0)


def interval(range_seconds: float, max_data_points: int, scrape_seconds: float) -> float:
    return round_interval(max(range_seconds / max_data_points, scrape_seconds))


def _duration(seconds: float) -> str:
    return f"{seconds:g}s" if seconds >= 1 else f"{round(seconds * 1000)}ms"


@dataclass(frozen=True)
class Request:
    """One query as Grafana sends it: `step` None for an instant query at `end`."""

    expr: str
    start: float
    end: float
    step: float | None


def request(target: dict[str, Any], max_data_points: int, start: float, end: float,
            scrape_seconds: float, variables: dict[str, str] | None = None) -> Request:
    """The request for `target` (a panel's target JSON) over [start, end]; dashboard
    variables from `variables`, `.+` (All) for the others."""
    step = interval(end - start, max_data_points, scrape_seconds)
    builtins = {
        "__interval": _duration(step),
        "__rate_interval": _duration(max(step + scrape_seconds, 4 * scrape_seconds)),
        "__range": f"{round(end - start)}s",
    }
    values = {**builtins, **(variables or {})}

    def value(match: re.Match[str]) -> str:
        return values.get(match.group(1) or match.group(2), ".+")

    expr = _VARIABLE.sub(value, target["expr"])
    if target.get("instant"):
        return Request(expr, start, end, None)
    return Request(expr, math.floor(start / step) * step, math.floor(end / step) * step, step)


def steps_of(panel: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    """The threshold steps Grafana colours query `ref` of `panel` by: an override on
    its refId, or the panel's own."""
    config = panel["fieldConfig"]
    for override in config.get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "thresholds":
                    return prop["value"]["steps"]
    return config["defaults"]["thresholds"]["steps"]


def color_of(value: float, steps: list[dict[str, Any]]) -> str:
    """The colour of the last step whose value `value` reaches (the base step's is None)."""
    color = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            color = step["color"]
    return color

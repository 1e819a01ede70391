"""What every rig dashboard is built from: variables, selectors, panels and layout.

Each builder produces what grafana/dashboard-linter asks for
(docs/facts/tooling.md#grafanadashboard-linter) by construction: one `datasource`
variable; `job`, `instance` and `rig` variables (plus `card` and `engine` where a
query uses them) that are multi-select, `.+` for All and refreshed on time-range
change; `${datasource}` on every panel and target; `[$__rate_interval]` in every
`rate`/`irate`/`increase`; a unit and a description on every panel.
`tests/dashboards/test_lint.py` checks the generated JSON against the same rules, so a
hand-written shortcut fails there.

grafanalib 0.7.1 is behind Grafana on several points (docs/facts/tooling.md#grafanalib-071): its
schemaVersion is 12, its variables refresh on load, its heatmap and state
timeline have no unit. Those are set here, through `extraJson` where grafanalib
has no field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
from grafanalib.core import (
    GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
    REFRESH_ON_TIME_RANGE_CHANGE,
    Annotations,
    Dashboard,
    DashboardLink,
    GridPos,
    Heatmap,
    Panel,
    RowPanel,
    Stat,
    StateTimeline,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from exporter.grafana_uids import DASHBOARD_UIDS
from exporter.schema import CARD_LABEL, ENGINE_LABEL, RIG_LABEL, TARGET_LABELS, label_list

# Grafana 10.4 / 11.x write 39; newer releases migrate it forward on load.
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TAG = "rig"
# Dashboard uids by the name of their `<name>.dashboard.py` (exporter/grafana_uids.py).
UIDS = DASHBOARD_UIDS
WIDTH = 24  # Grafana's grid is 24 columns wide
# Grafana's custom unit: the value, then the suffix (it has no token unit).
TOKENS_PER_SECOND = "suffix: tok/s"
TOKENS = "suffix: tok"
# Grafana's own maxDataPoints is the panel's width in pixels; a grid column is about
# 80 px on a 1920-px screen. grafanalib's fixed 100 gave a 5 min step over 6 h.
PX_PER_COLUMN = 80

# The variables that select a target, then each variable in the order they are shown
# with the label it selects (exporter/schema.py). `engine` selects the configured
# engine name (`engine`), not its kind (`kind`).
TARGET_VARIABLES = (*TARGET_LABELS, RIG_LABEL)
VARIABLE_LABELS = {name: name for name in (*TARGET_VARIABLES, CARD_LABEL, ENGINE_LABEL)}
VARIABLE_SOURCES = {
    "job": "rig_build_info",
    "instance": 'rig_build_info{job=~"$job"}',
    "rig": 'rig_build_info{job=~"$job", instance=~"$instance"}',
    "card": 'rig_gpu_present{job=~"$job", instance=~"$instance", rig=~"$rig"}',
    "engine": 'rig_engine_info{job=~"$job", instance=~"$instance", rig=~"$rig"}',
}

# Series that carry `card` or `engine`, raw or recorded (alerts/rules/common.py).
# rig_gpu_expected_cards is per exporter, not per card.
_CARD_SERIES = re.compile(r"^(rig_gpu_(?!expected_cards$)|card(_sensor)?:)")
_ENGINE_SERIES = re.compile(r"^(rig_engine_|rig_probe_|rig_stream_|rig_agent_|engine(_tier)?:)")


def sel(metric: str, *matchers: str) -> str:
    """`metric` with the dashboard's variable matchers and any extra `matchers`."""
    labels = [f'{VARIABLE_LABELS[v]}=~"${v}"' for v in TARGET_VARIABLES]
    if _CARD_SERIES.match(metric):
        labels.append(f'{CARD_LABEL}=~"${CARD_LABEL}"')
    if _ENGINE_SERIES.match(metric):
        labels.append(f'{ENGINE_LABEL}=~"${ENGINE_LABEL}"')
    return metric + "{" + ", ".join([*labels, *matchers]) + "}"


def rate(metric: str, *matchers: str, fn: str = "rate") -> str:
    return f"{fn}({sel(metric, *matchers)}[$__rate_interval])"


_PLAIN_SELECTOR = re.compile(r"[a-zA-Z_][\w:]*\{[^{}]*\}")


def over_interval(fn: str, expr: str, interval: str = "$__interval") -> str:
    """`fn`_over_time (max or min) of `expr` over each point's own interval: a peak or
    a stall between two points of the graph still reaches one of them. A plain selector
    takes a range; anything else a subquery at the rule evaluation interval."""
    if _PLAIN_SELECTOR.fullmatch(expr):
        return f"{fn}_over_time({expr}[{interval}])"
    return f"{fn}_over_time(({expr})[{interval}:])"


def over_range(fn: str, expr: str) -> str:
    """`fn`_over_time of `expr` over the dashboard's whole time range, for an instant
    query: the worst value of the range, whatever the step."""
    return over_interval(fn, expr, "$__range")


def just_above(value: float) -> float:
    """Where a step for "more than `value`" starts: Grafana's steps start at their value."""
    return math.nextafter(value, math.inf)


def or_zero(expr: str, base: str, by: str) -> str:
    """`expr`, or 0 for each (`by`) series of `base` where `expr` has none: a counter
    that is not created until its first event reads 0, as is true, not "No data"."""
    return f"({expr}) or max by ({by}) ({base} * 0)"


def target(expr: str, legend: str, ref: str = "A", fmt: str = "time_series",
           instant: bool = False) -> Target:
    return Target(expr=expr, legendFormat=legend, refId=ref, format=fmt,
                  datasource=DATASOURCE, intervalFactor=1, instant=instant)


def targets(*pairs: tuple[str, str], instant: bool = False) -> list[Target]:
    """Targets from (expr, legend) pairs, lettered A, B, C..."""
    return [target(expr, legend, chr(ord("A") + i), instant=instant)
            for i, (expr, legend) in enumerate(pairs)]


def steps(*levels: tuple[str, float]) -> list[dict[str, Any]]:
    """Threshold steps: green below the first level, then each (color, from value)."""
    return [{"color": "green", "value": None}] + [
        {"color": color, "value": value} for color, value in levels
    ]


def falling_steps(*levels: tuple[str, float], inclusive: bool = False) -> list[dict[str, Any]]:
    """Threshold steps for a value that is bad when low: (color, below value), or at or
    below it with `inclusive` (a rule's `<=`: Grafana's step starts at its value, so the
    next colour starts just above it)."""
    ordered = sorted(levels, key=lambda level: level[1])
    colors = [color for color, _ in ordered] + ["green"]
    def start(value: float) -> float:
        return just_above(value) if inclusive else value

    return [{"color": colors[0], "value": None}] + [
        {"color": colors[i + 1], "value": start(value)} for i, (_, value) in enumerate(ordered)
    ]


def scoped(ref: str, thresholds: list[dict[str, Any]], *, lines: bool = False,
           unit: str | None = None) -> dict[str, Any]:
    """An override giving the query `ref` its own thresholds (and, on a graph, its own
    dashed lines; or its own unit): a limit judges the series its rule judges."""
    properties: list[dict[str, Any]] = [
        {"id": "thresholds", "value": {"mode": "absolute", "steps": thresholds}}]
    if lines:
        properties.append({"id": "custom.thresholdsStyle", "value": {"mode": "dashed"}})
    if unit is not None:
        properties.append({"id": "unit", "value": unit})
    return {"matcher": {"id": "byFrameRefID", "options": ref}, "properties": properties}


def plain(ref: str) -> dict[str, Any]:
    """An override that takes the query `ref` out of the panel's thresholds."""
    return scoped(ref, steps())


def alerts_note(*alerts: str) -> str:
    """The sentence the runbook-link test reads: which alerts this panel shows."""
    return f" Shows: {', '.join(alerts)}." if alerts else ""


@dataclass
class Cell:
    """A panel and its size; `layout` gives it a position and an id."""

    panel: Panel
    w: int = 12
    h: int = 8


def timeseries(title: str, description: str, unit: str, queries: Sequence[Target], *,
               thresholds: list[dict[str, Any]] | None = None, judged: Sequence[str] = ("A",),
               alerts: Sequence[str] = (),
               w: int = 12, h: int = 8, stack: bool = False, bars: bool = False,
               min_value: int | None = None, max_value: int | None = None,
               soft_max: float | None = None,
               axis_label: str = "", overrides: list[dict[str, Any]] | None = None) -> Cell:
    """A graph; `thresholds` are drawn as dashed lines on the `judged` queries only."""
    scoped_lines = [scoped(ref, thresholds, lines=True) for ref in judged] if thresholds else []
    extra = {"fieldConfig": {"defaults": {"custom": {"axisSoftMax": soft_max}}}} \
        if soft_max is not None else {}
    panel = TimeSeries(
        title=title,
        description=description + alerts_note(*alerts),
        dataSource=DATASOURCE,
        targets=list(queries),
        unit=unit,
        axisLabel=axis_label,
        thresholds=steps(),
        thresholdsStyleMode="off",
        stacking={"mode": "normal", "group": "A"} if stack else {},
        drawStyle="bars" if bars else "line",
        fillOpacity=60 if bars else (20 if stack else 0),
        valueMin=min_value,
        valueMax=max_value,
        overrides=[*scoped_lines, *(overrides or [])],
        legendDisplayMode="table",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        spanNulls=False,
        extraJson=extra,
    )
    return Cell(panel, w, h)


def stat(title: str, description: str, unit: str, queries: Sequence[Target], *,
         thresholds: list[dict[str, Any]],
         link: tuple[str, str] | None = None, alerts: Sequence[str] = (),
         mappings: list[dict[str, Any]] | None = None,
         overrides: list[dict[str, Any]] | None = None, no_value: str = "0",
         w: int = 4, h: int = 4) -> Cell:
    """A tile of instant queries, each series named by its legend and coloured by
    `thresholds` (or its own, through `overrides`); the queries say what value of the
    range they show (`over_range`). `no_value` is what no series at all means."""
    links = []
    if link is not None:
        text, uid = link
        links.append({"title": text, "url": dashboard_url(uid), "targetBlank": False})
    panel = Stat(
        title=title,
        description=description + alerts_note(*alerts),
        dataSource=DATASOURCE,
        targets=list(queries),
        format=unit,
        color={"mode": "thresholds"},
        thresholds=thresholds,
        colorMode="background",
        graphMode="none",
        reduceCalc="lastNotNull",
        textMode="value_and_name",
        noValue=no_value,
        mappings=mappings or [],
        overrides=overrides or [],
        links=links,
    )
    return Cell(panel, w, h)


def heatmap(title: str, description: str, query: Target, *, unit: str = "s",
            alerts: Sequence[str] = (), w: int = 12, h: int = 8) -> Cell:
    """A histogram's buckets over time (Grafana 9+ heatmap, buckets pre-computed);
    grafanalib's pre-9 heatmap keys are dropped from the JSON (dashboards/clean.py)."""
    panel = Heatmap(
        title=title,
        description=description + alerts_note(*alerts),
        dataSource=DATASOURCE,
        targets=[query],
        extraJson={
            "fieldConfig": {"defaults": {"unit": unit}},
            "options": {
                "calculate": False,
                "yAxis": {"unit": unit, "axisPlacement": "left"},
                "rowsFrame": {"layout": "le"},
                "cellValues": {"unit": "short"},
                "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5,
                          "steps": 64, "fill": "dark-orange", "scale": "exponential",
                          "reverse": False},
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "showValue": "never",
                "filterValues": {"le": 1e-9},
                "tooltip": {"show": True, "yHistogram": True},
                "legend": {"show": True},
            },
        },
    )
    return Cell(panel, w, h)


def state_timeline(title: str, description: str, queries: Sequence[Target], *,
                   mappings: list[dict[str, Any]], unit: str = "bool_on_off",
                   alerts: Sequence[str] = (), no_value: str | None = None,
                   w: int = 24, h: int = 8) -> Cell:
    panel = StateTimeline(
        title=title,
        description=description + alerts_note(*alerts),
        dataSource=DATASOURCE,
        targets=list(queries),
        mappings=mappings,
        extraJson={"fieldConfig": {"defaults": {"unit": unit, "noValue": no_value}}},
    )
    return Cell(panel, w, h)


def on_off(off: str, on: str, on_color: str = "red",
           off_color: str = "transparent") -> list[dict[str, Any]]:
    """Value mappings for a 0/1 series."""
    return [{"type": "value", "options": {
        "0": {"text": off, "color": off_color, "index": 0},
        "1": {"text": on, "color": on_color, "index": 1},
    }}]


def threshold_override(series_regex: str) -> dict[str, Any]:
    """Draw the series whose legend matches `series_regex` as a dashed red limit line."""
    return {
        "matcher": {"id": "byRegexp", "options": series_regex},
        "properties": [
            {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "custom.fillOpacity", "value": 0},
        ],
    }


def dashboard_url(uid: str) -> str:
    """A link to another rig dashboard keeping the time range and the variables."""
    return f"/d/{uid}?${{__url_time_range}}&${{__all_variables}}"


def _variable(name: str) -> Template:
    label = VARIABLE_LABELS[name]
    variable = Template(
        name=name,
        label=name.title(),
        query=f"label_values({VARIABLE_SOURCES[name]}, {label})",
        dataSource={"type": "prometheus", "uid": "$datasource"},
        multi=True,
        includeAll=True,
        allValue=".+",
        refresh=REFRESH_ON_TIME_RANGE_CHANGE,
        sort=1,
    )
    # grafanalib has no argument for an "All" default.
    variable._current = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return variable


def _datasource_variable() -> Template:
    variable = Template(name="datasource", label="Data source", query="prometheus",
                        type="datasource", refresh=REFRESH_ON_TIME_RANGE_CHANGE)
    variable._current = {"selected": False, "text": "default", "value": "default"}
    return variable


def templating(panels: Sequence[Panel]) -> Templating:
    """The datasource, job, instance and rig variables, and card / engine when used."""
    text = " ".join(t.expr for p in panels for t in p.targets)
    names = [*TARGET_VARIABLES] + [v for v in (CARD_LABEL, ENGINE_LABEL) if f"${v}" in text]
    return Templating(list=[_datasource_variable(), *(_variable(n) for n in names)])


@dataclass
class Section:
    """A titled row of cells."""

    title: str
    cells: list[Cell] = field(default_factory=list)


def layout(sections: Sequence[Section]) -> list[Panel]:
    """Rows and cells flowed left to right, 24 columns wide, with ids in reading order."""
    panels: list[Panel] = []
    y = 0
    next_id = 1
    for section in sections:
        panels.append(RowPanel(title=section.title, id=next_id,
                               gridPos=GridPos(h=1, w=WIDTH, x=0, y=y),
                               description=section.title))
        next_id += 1
        y += 1
        x, row_h = 0, 0
        for cell in section.cells:
            if x + cell.w > WIDTH:
                x, y, row_h = 0, y + row_h, 0
            panels.append(attr.evolve(cell.panel, id=next_id,
                                      gridPos=GridPos(h=cell.h, w=cell.w, x=x, y=y),
                                      maxDataPoints=cell.w * PX_PER_COLUMN))
            next_id += 1
            x += cell.w
            row_h = max(row_h, cell.h)
        y += row_h
    return panels


# The labels that tell two rig alerts apart: which rule (signal), card, sensor, engine.
ALERT_LABELS = label_list(RIG_LABEL, "alertname", "severity", "signal", CARD_LABEL, "sensor",
                          ENGINE_LABEL)
ALERT_STATE_COLORS = {"pending": "orange", "firing": "red"}


def rig_alerts(state: str) -> str:
    """Prometheus' ALERTS series of the rig alerts in `state` (pending or firing)."""
    series = sel("ALERTS", 'alertname=~"Rig.+"', f'alertstate="{state}"')
    return f"max by ({ALERT_LABELS}) ({series})"


def alert_annotations() -> Annotations:
    """Each rig alert's pending and firing spans, marked on every time axis."""
    return Annotations(list=[{
        "datasource": DATASOURCE,
        "enable": True,
        "expr": rig_alerts(state),
        "iconColor": color,
        "name": f"Rig alerts {state}",
        "step": "30s",
        "titleFormat": f"{{{{alertname}}}} {state}",
        "tagKeys": ALERT_LABELS.replace(" ", ""),
        "textFormat": "{{severity}} {{signal}} {{card}} {{sensor}} {{engine}}",
        "useValueForTime": False,
    } for state, color in ALERT_STATE_COLORS.items()])


def rig_dashboard(title: str, uid: str, description: str,
              sections: Sequence[Section]) -> Dashboard:
    panels = layout(sections)
    return Dashboard(
        annotations=alert_annotations(),
        title=title,
        uid=uid,
        description=description,
        tags=[TAG],
        panels=panels,
        templating=templating(panels),
        links=[DashboardLink(title="Rig dashboards", type="dashboards", tags=[TAG],
                             asDropdown=False, includeVars=True, keepTime=True)],
        schemaVersion=SCHEMA_VERSION,
        graphTooltip=GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        refresh="30s",
        time=Time("now-1h", "now"),
        timezone="browser",
        editable=True,
    )

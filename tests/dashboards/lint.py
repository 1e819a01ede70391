"""grafana/dashboard-linter's rules, emulated over dashboard JSON
(docs/facts/tooling.md#grafanadashboard-linter).

The linter is a Go binary that cannot be installed here, so its high-value rules
and this project's own (a `rig` variable and selector, a modern schemaVersion, links
between the dashboards; docs/dashboards.md) are checked in Python. `lint()` returns one line per
problem, each naming the dashboard and the panel.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from alerts.rules.common import dur
from exporter.thresholds import Thresholds
from tests.alerts.promql_lint import analyse
from tests.dashboards.queries import panels, substitute, variables

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana 9.0 (schema 36) is the oldest with the panels used here (state timeline,
# the new heatmap); older schemas are migrated by Grafana and lose settings.
MIN_SCHEMA_VERSION = 36
TARGET_VARIABLES = {"job": "job", "instance": "instance", "rig": "rig"}
SCOPED_VARIABLES = {"card": "card", "engine": "engine"}
# rig_gpu_expected_cards is per exporter: it has no card label.
CARD_SERIES = re.compile(r"^(rig_gpu_(?!expected_cards$)|card(_sensor)?:)")
ENGINE_SERIES = re.compile(r"^(rig_engine_|rig_probe_|rig_stream_|engine(_tier)?:)")
PANELS_WITH_UNITS = {"timeseries", "stat", "gauge", "bargauge", "heatmap", "state-timeline",
                     "table", "graph", "singlestat"}

# Grafana's unit ids that these dashboards may use; a subset of dashboard-linter's
# list (lint/rule_panel_units.go, from Grafana's valueFormats/categories.ts).
VALID_UNITS = {
    "none", "short", "percent", "percentunit", "bytes", "decbytes", "Bps", "binBps",
    "watt", "joule", "celsius", "hertz", "ns", "µs", "ms", "s", "m", "h", "d",
    "ops", "reqps", "rotrpm", "bool", "bool_yes_no", "bool_on_off",
}

# A metric name or a recorded series (level:metric:operation), whole, and its {...};
# a name followed by "(" is a function.
_SELECTOR = re.compile(r"(?<![\w:$.])([a-zA-Z_]\w*(?::\w+)*)(?![\w:])\s*(\{[^}]*\})?(?!\s*\()")
_NOT_SERIES = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "count", "group", "stddev",
    "stdvar", "topk", "bottomk", "quantile", "count_values",
}
_RANGE_FUNCTIONS = re.compile(r"\b(rate|irate|increase)\s*\(")
# Grafana's own ranges: a rate's, a graph point's interval, the whole time range
# (an instant tile's), and subqueries over the last two.
GRAFANA_RANGES = {"$__rate_interval", "$__interval", "$__interval:", "$__range", "$__range:"}
# A rule's expression on a tile keeps the rule's windows and holds, which come from
# the threshold table (dashboards/rules.py); no other fixed range is allowed.
RULE_RANGES = {dur(getattr(Thresholds(), f.name)) for f in dataclasses.fields(Thresholds)
               if f.name.endswith("_seconds") and f.type == "int"}
# Grafana's custom units: a suffix after the value ("suffix: tok/s").
_CUSTOM_UNIT = re.compile(r"suffix: \S.*")


def _mask(text: str, pattern: str) -> str:
    """`text` with each match of `pattern` blanked, keeping every other position."""
    return re.sub(pattern, lambda m: " " * len(m.group(0)), text)


def _selectors(expr: str) -> Iterator[tuple[str, str]]:
    """(metric, matcher text) for each series selector in a PromQL expression."""
    masked = _mask(expr, r'"[^"]*"')  # label values are not names
    # Label lists of by/without/on/ignoring/group_* are not selectors.
    masked = _mask(masked, r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
    for match in _SELECTOR.finditer(masked):
        if match.group(1).lower() in _NOT_SERIES:
            continue
        braces = expr[match.start(2):match.end(2)] if match.group(2) else ""
        yield match.group(1), braces


def _arguments(expr: str, open_paren: int) -> str:
    depth = 0
    for i in range(open_paren, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return expr[open_paren + 1:i]
    return expr[open_paren + 1:]


def lint_expr(expr: str, defined: set[str]) -> list[str]:
    problems = []
    for match in _RANGE_FUNCTIONS.finditer(expr):
        argument = _arguments(expr, match.end() - 1).rstrip()
        window = re.search(r"\[([^\]]*)\]$", argument)
        # $__range: an instant tile's count over the whole time range.
        if not window or window.group(1) not in {"$__rate_interval", "$__range"} | RULE_RANGES:
            problems.append(f"{match.group(1)}() without [$__rate_interval]: {argument}")
    ranges = set(re.findall(r"\[([^\]]*)\]", expr)) - GRAFANA_RANGES - RULE_RANGES
    if ranges:
        problems.append(f"a fixed range {sorted(ranges)}")
    for name in re.findall(r"\$\{?(\w+)", expr):
        if name not in {"__rate_interval", "__interval", "__range"} and name not in defined:
            problems.append(f"${name} is not a variable of this dashboard")
    for metric, matchers in _selectors(expr):
        wanted = dict(TARGET_VARIABLES)
        if CARD_SERIES.match(metric):
            wanted["card"] = "card"
        if ENGINE_SERIES.match(metric):
            wanted["engine"] = "engine"
        for variable, label in wanted.items():
            if f'{label}=~"${variable}"' not in matchers:
                problems.append(f'{metric} lacks {label}=~"${variable}"')
        if metric.endswith("_total") and not _inside_range_function(expr, metric):
            problems.append(f"counter {metric} outside rate/irate/increase")
    # The labels it names against the exporter's own (the golden expositions).
    try:
        problems += analyse(substitute(expr, "5m"))[1].unknown_labels
    except (ValueError, IndexError) as exc:
        problems.append(f"the PromQL analyser cannot read it: {exc}")
    return problems


def _inside_range_function(expr: str, metric: str) -> bool:
    for match in _RANGE_FUNCTIONS.finditer(expr):
        if metric in _arguments(expr, match.end() - 1):
            return True
    return False


def _lint_variables(dashboard: dict[str, Any], used: set[str]) -> list[str]:
    problems = []
    found = variables(dashboard)
    sources = [v for v in found.values() if v["type"] == "datasource"]
    if [v["name"] for v in sources] != ["datasource"]:
        problems.append("needs exactly one datasource variable, named datasource")
    elif sources[0]["label"] != "Data source" or sources[0]["query"] != "prometheus":
        problems.append("the datasource variable is labelled 'Data source', query prometheus")
    wanted = set(TARGET_VARIABLES) | (used & set(SCOPED_VARIABLES))
    for name in sorted(wanted):
        variable = found.get(name)
        if variable is None:
            problems.append(f"variable {name} is missing")
            continue
        label = {**TARGET_VARIABLES, **SCOPED_VARIABLES}[name]
        checks = {
            "type query": variable["type"] == "query",
            "datasource $datasource": variable["datasource"] == {
                "type": "prometheus", "uid": "$datasource"},
            f"label {name.title()}": variable["label"] == name.title(),
            "multi-select": variable["multi"] is True,
            "an All option": variable["includeAll"] is True,
            "allValue .+": variable["allValue"] == ".+",
            "refresh on time-range change (2)": variable["refresh"] == 2,
            f"label_values(..., {label})": re.fullmatch(
                rf"label_values\(.+, {label}\)", variable["query"]) is not None,
        }
        problems += [f"variable {name} needs {what}" for what, ok in checks.items() if not ok]
    return problems


def lint(dashboard: dict[str, Any]) -> list[str]:
    """Every rule broken by one dashboard, as 'dashboard X, panel Y: problem' lines."""
    title = dashboard.get("title", "?")
    problems = []
    defined = set(variables(dashboard))
    exprs = [t.get("expr", "") for p in panels(dashboard) for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\$\{?(\w+)", e)}
    problems += [f"dashboard {title!r}: {p}" for p in _lint_variables(dashboard, used)]
    if dashboard.get("schemaVersion", 0) < MIN_SCHEMA_VERSION:
        problems.append(f"dashboard {title!r}: schemaVersion {dashboard.get('schemaVersion')}"
                        f" is older than {MIN_SCHEMA_VERSION}")
    if not any(link.get("type") == "dashboards" and link.get("includeVars")
               and link.get("keepTime") for link in dashboard.get("links", [])):
        problems.append(f"dashboard {title!r}: no link to the other dashboards"
                        " (keeping the time range and variables)")
    for panel in panels(dashboard):
        where = f"dashboard {title!r}, panel {panel.get('title')!r}"
        if panel["type"] == "row":
            continue
        if not panel.get("description"):
            problems.append(f"{where}: no description")
        if panel["type"] in PANELS_WITH_UNITS:
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
            if unit not in VALID_UNITS and not _CUSTOM_UNIT.fullmatch(unit or ""):
                problems.append(f"{where}: unit {unit!r} is not a Grafana unit id")
        if not panel.get("targets"):
            problems.append(f"{where}: no queries")
        if panel.get("datasource") != DATASOURCE:
            problems.append(f"{where}: datasource {panel.get('datasource')} is not"
                            " ${datasource}")
        for target in panel.get("targets", []):
            ref = target.get("refId")
            if target.get("datasource") != DATASOURCE:
                problems.append(f"{where}, query {ref}: datasource is not ${{datasource}}")
            for problem in lint_expr(target.get("expr", ""), defined):
                problems.append(f"{where}, query {ref}: {problem}")
    return problems

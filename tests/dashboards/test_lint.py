"""The committed dashboards pass the dashboard-linter rules (tests/dashboards/lint.py),
and each rule can fail, naming the dashboard and the panel."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.dashboards.lint import lint
from tests.dashboards.queries import committed, panels, variables

DASHBOARDS = {d["title"]: d for d in committed()}


@pytest.mark.parametrize("title", sorted(DASHBOARDS))
def test_committed_dashboard_passes_lint(title: str) -> None:
    problems = lint(DASHBOARDS[title])
    assert not problems, "\n".join(problems)


def _first(dashboard: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(p for p in panels(dashboard) if p["type"] == kind)


def _set_expr(expr: str) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        _first(d, "timeseries")["targets"][0]["expr"] = expr
    return mutate


def _no_unit(d: dict[str, Any]) -> None:
    _first(d, "timeseries")["fieldConfig"]["defaults"]["unit"] = ""


def _no_description(d: dict[str, Any]) -> None:
    _first(d, "heatmap")["description"] = ""


def _fixed_datasource(d: dict[str, Any]) -> None:
    _first(d, "timeseries")["datasource"] = {"type": "prometheus", "uid": "ddyfngn31dg5cf"}


def _single_select(d: dict[str, Any]) -> None:
    variables(d)["instance"]["multi"] = False


def _refresh_on_load(d: dict[str, Any]) -> None:
    variables(d)["rig"]["refresh"] = 1


def _old_schema(d: dict[str, Any]) -> None:
    d["schemaVersion"] = 12


def _no_links(d: dict[str, Any]) -> None:
    d["links"] = []


SELECTOR = 'rig_gpu_busy_ratio{job=~"$job", instance=~"$instance", rig=~"$rig", card=~"$card"}'
BROKEN: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "fixed rate window": (
        _set_expr("rate(rig_engine_decode_batches_total{job=~\"$job\", instance=~\"$instance\","
                  " rig=~\"$rig\", engine=~\"$engine\"}[7m])"),
        "rate() without [$__rate_interval]",
    ),
    "no rig matcher": (
        _set_expr('rig_engine_running_requests{job=~"$job", instance=~"$instance",'
                  ' engine=~"$engine"}'),
        'rig_engine_running_requests lacks rig=~"$rig"',
    ),
    "no card matcher": (
        _set_expr(SELECTOR.replace(', card=~"$card"', "")), 'lacks card=~"$card"'),
    "bare counter": (
        _set_expr('rig_engine_decode_batches_total{job=~"$job", instance=~"$instance",'
                  ' rig=~"$rig", engine=~"$engine"}'),
        "counter rig_engine_decode_batches_total outside rate",
    ),
    "a label the family lacks": (
        _set_expr('sum by (tier) (rig_engine_running_requests{job=~"$job", instance=~"$instance",'
                  ' rig=~"$rig", engine=~"$engine"})'),
        "the operand of by has no label 'tier'",
    ),
    "a matcher on a label the family lacks": (
        _set_expr(SELECTOR.replace('card=~"$card"', 'card=~"$card", sensor="edge"')),
        "rig_gpu_busy_ratio has no label 'sensor'",
    ),
    "undefined variable": (_set_expr(SELECTOR.replace("$rig", "$rack")),
                           "$rack is not a variable"),
    "no unit": (_no_unit, "unit '' is not a Grafana unit id"),
    "no description": (_no_description, "no description"),
    "fixed datasource": (_fixed_datasource, "is not ${datasource}"),
    "single-select variable": (_single_select, "variable instance needs multi-select"),
    "refresh on load": (_refresh_on_load, "variable rig needs refresh on time-range change"),
    "old schema": (_old_schema, "schemaVersion 12 is older than 36"),
    "no dashboard links": (_no_links, "no link to the other dashboards"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_lint_names_the_dashboard_and_panel(case: str) -> None:
    mutate, expected = BROKEN[case]
    dashboard = copy.deepcopy(DASHBOARDS["Rig: decode and latency"])
    if "card" in case or "undefined" in case or "matcher" in case:
        dashboard = copy.deepcopy(DASHBOARDS["Rig: GPUs"])
    mutate(dashboard)
    problems = lint(dashboard)
    assert any(expected in p for p in problems), problems
    assert all(p.startswith(f"dashboard {dashboard['title']!r}") for p in problems)
    if case in {"fixed rate window", "no unit", "no description", "fixed datasource"}:
        assert all(", panel '" in p for p in problems), problems

"""Offline lint of the generated rules, after pint's offline checks
(docs/facts/tooling.md#pints-offline-checks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.generate import RULES_PATH
from alerts.rules.common import RUNBOOK_URL
from exporter.thresholds import Thresholds
from tests.alerts import promql_lint
from tests.alerts.promql_lint import COUNTER_FUNCTIONS, COUNTERS, analyse, schema_labels, seconds

SCRAPE_INTERVAL_SECONDS = 15  # the exporter's documented scrape interval
LOST_SCRAPE_BRIDGE_SECONDS = Thresholds().lost_scrape_bridge_seconds
RUNBOOK = Path(__file__).resolve().parents[2] / "alerts" / "RUNBOOK.md"
TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")
# The alert list of docs/alerts.md.
DESIGN_ALERTS = {
    "RigAgentHoggingEngine",
    "RigAgentRunawayOutput",
    "RigAgentContextNearLimit",
    "RigAgentsWorkingSetOverPool",
    "RigAgentRecomputing",
    "RigDecodeStarvation",
    "RigDecodeStuttering",
    "RigEngineDown",
    "RigEngineWedged",
    "RigQueueHeadOfLine",
    "RigKVPoolSaturated",
    "RigSpecDecodeAcceptanceLow",
    "RigHiCacheThrash",
    "RigHiCacheHostPoolFull",
    "RigHiCacheStorageMisses",
    "RigGpuThermalDownclock",
    "RigGpuHot",
    "RigGpuPowerCapped",
    "RigGpuMissing",
    "RigGpuPcieDegraded",
    "RigHostSwapping",
    "RigHostMemoryPressure",
    "RigCpuHot",
    "RigExporterSourceDown",
}


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES_PATH.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


ALERTS = [r for r in _rules() if "alert" in r]
RECORDS = [r for r in _rules() if "record" in r]


def _id(rule: dict[str, Any]) -> str:
    labels = rule.get("labels", {})
    return "-".join([rule.get("alert") or rule["record"], *labels.values()])


def test_every_design_alert_exists() -> None:
    assert {r["alert"] for r in ALERTS} == DESIGN_ALERTS


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_alert_name_severity_and_annotations(rule: dict[str, Any]) -> None:
    assert re.fullmatch(r"Rig[A-Z][A-Za-z]+", rule["alert"])
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = rule["annotations"]
    assert annotations["summary"].endswith(".") and annotations["summary"][0].isupper()
    assert "{{" not in annotations["summary"], "summary is static so grouped alerts read alike"
    assert "$value" in annotations["description"] or "$labels" in annotations["description"]
    assert annotations["runbook_url"] == RUNBOOK_URL + rule["alert"].lower()


def test_every_runbook_anchor_exists() -> None:
    headings = {h.lower() for h in re.findall(r"^## (\S+)\s*$", RUNBOOK.read_text(), re.M)}
    assert {r["alert"].lower() for r in ALERTS} <= headings


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_alert_has_a_comparison(rule: dict[str, Any]) -> None:
    # Any series an alert query returns fires: without a comparison it always fires.
    assert analyse(rule["expr"])[1].comparisons > 0


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_no_value_in_labels(rule: dict[str, Any]) -> None:
    # A label that changes with the value makes a new alert at every evaluation.
    assert not any("$value" in v or "{{" in v for v in rule["labels"].values())


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_templates_use_only_labels_the_query_keeps(rule: dict[str, Any]) -> None:
    kept, _ = analyse(rule["expr"])
    assert kept is not None and "<unknown>" not in kept
    used = set(TEMPLATE_LABEL.findall(" ".join(rule["annotations"].values())))
    assert used <= kept | set(rule["labels"]), f"removed by the query: {used - kept}"


@pytest.mark.parametrize("rule", ALERTS + RECORDS, ids=_id)
def test_selectors_are_schema_metrics_or_recorded(rule: dict[str, Any]) -> None:
    recorded = {r["record"] for r in RECORDS}
    for metric in analyse(rule["expr"])[1].metrics:
        assert schema_labels(metric) is not None or metric in recorded, metric
        if ":" in metric:
            assert metric in recorded, f"{metric} is not a recording rule of this file"


@pytest.mark.parametrize("rule", ALERTS + RECORDS, ids=_id)
def test_rate_only_over_schema_counters_with_a_long_enough_range(rule: dict[str, Any]) -> None:
    for function, argument, window in analyse(rule["expr"])[1].ranges:
        if function == "last_over_time":
            # Not a rate: the last sample over a lost scrape, in a held alert only
            # and over the one window the thresholds give (alerts/rules/lost_scrape.py).
            assert "for" in rule, f"{function}({argument}) in an alert without a hold"
            assert seconds(window.strip("[]")) == LOST_SCRAPE_BRIDGE_SECONDS, window
            continue
        assert seconds(window.strip("[]").split(":")[0]) >= 2 * SCRAPE_INTERVAL_SECONDS, window
        if function in COUNTER_FUNCTIONS:
            metric = argument.split()[0]
            assert metric.endswith("_total") and metric in COUNTERS, f"{function}({argument})"


def test_recording_rule_names_follow_level_metric_operation() -> None:
    for rule in RECORDS:
        level, metric, operation = rule["record"].split(":")
        assert level and operation and metric.startswith("rig_")
        assert not metric.endswith("_total"), "a rate drops the _total suffix"


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_alert_keeps_every_target_label(rule: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy/prometheus.yml gives every target a `rig` label; an alert whose query
    drops it (a one-to-one `on(...)` keeps only the listed labels) pages without
    saying which rig, and groups two rigs' alerts into one page."""
    monkeypatch.setattr(promql_lint, "TARGET", promql_lint.TARGET | {"rig"})
    kept, _ = analyse(rule["expr"])
    assert kept is not None and "rig" in kept, kept


@pytest.mark.parametrize("rule", ALERTS + RECORDS, ids=_id)
def test_labels_named_are_the_familys(rule: dict[str, Any]) -> None:
    """Every label a matcher, a `by`/`without` or an `on`/`group_left` names is one
    the exporter exports on that family (the golden expositions say which)."""
    assert not analyse(rule["expr"])[1].unknown_labels


@pytest.mark.parametrize(("expr", "problem"), [
    ('rig_engine_kv_usage_ratio{engine="main", tier="L1"} > 0.9',
     "rig_engine_kv_usage_ratio has no label 'tier'"),
    ("max by (engine, card) (rig_engine_queued_requests) > 4",
     "the operand of by has no label 'card'"),
    ("rig_engine_running_requests > on (engine, kind, sensor) rig_engine_queued_requests",
     "the left side of > on() has no label 'sensor'"),
    ("rig_engine_running_requests > on (engine, kind) group_left (model_name) rig_engine_info",
     "the right side of > has no label 'model_name'"),
])
def test_the_lint_fails_on_a_label_a_family_lacks(expr: str, problem: str) -> None:
    assert problem in analyse(expr)[1].unknown_labels


def test_a_label_the_golden_loses_fails_the_lint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is the goldens': a family that stops exporting a label fails every
    rule that names it."""
    schema = dict(promql_lint.GAUGES, rig_engine_info=promql_lint.ENGINE)
    monkeypatch.setattr(promql_lint, "GAUGES", schema)
    assert analyse('rig_engine_info{model=~".+"}')[1].unknown_labels == [
        "rig_engine_info has no label 'model'"]


def test_the_table_comes_from_the_goldens() -> None:
    families = promql_lint.golden_families()
    assert families["rig_engine_cache_hit_tokens"] == ("counter", {"engine", "kind", "tier"})
    assert families["rig_engine_decode_stall_plan_info"][1] == {
        "engine", "kind", "plan", "progress", "in_flight"}
    assert promql_lint.schema_labels("rig_gpu_temperature_limit_celsius") == {
        "card", "sensor", "limit", "job", "instance"}


@pytest.mark.parametrize("name", sorted(promql_lint.NOT_IN_THE_GOLDENS))
def test_a_family_outside_the_goldens_is_the_exporters_and_still_outside(name: str) -> None:
    """The hand-kept rest: each is a family the collector writes, and none that a
    golden shows (then the golden's labels are the table's, and this entry goes)."""
    collector = Path(__file__).resolve().parents[2] / "exporter" / "daemon" / "collector"
    kind = promql_lint.NOT_IN_THE_GOLDENS[name][0]
    family = name.removesuffix("_total") if kind == "counter" else name
    assert family not in promql_lint.golden_families(), f"{name}: a golden shows it now"
    short = name.removeprefix("rig_")
    assert any(f'"{short}"' in p.read_text() or f'"{short.removeprefix("engine_")}"'
               in p.read_text() for p in collector.glob("*.py")), name

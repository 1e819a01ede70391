"""promtool and amtool over the committed rules, unit tests and Alertmanager config.

The Debian packages `prometheus` (promtool 2.42) and `prometheus-alertmanager`
(amtool 0.25) are required: a missing tool fails these tests, it never skips them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.generate import RULES_PATH
from tests.support.priority import NICED

pytestmark = pytest.mark.long_running(33)

REPO = Path(__file__).resolve().parents[2]
ALERTS_DIR = REPO / "alerts"
ALERTMANAGER = ALERTS_DIR / "alertmanager.yml"
UNIT_TESTS = sorted((ALERTS_DIR / "tests").glob("*.yaml"))
RECEIVERS = {"critical": "rig-pager", "warning": "rig-warnings", "info": "null"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: apt-get install prometheus prometheus-alertmanager"
    return path


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NICED, _tool(tool), *args], cwd=REPO, capture_output=True, text=True, timeout=120,
        check=False)


@cache
def _unit_test_groups() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, group)
        for path in UNIT_TESTS
        for group in yaml.safe_load(path.read_text())["tests"]
    ]


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES_PATH.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules_lint_fatal() -> None:
    result = _run("promtool", "check", "rules", "--lint=all", "--lint-fatal", str(RULES_PATH))
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_are_promtool_unit_tests() -> None:
    assert UNIT_TESTS


# One test per file: the workers spread them, and a failure names its file.
@pytest.mark.parametrize("path", UNIT_TESTS, ids=[p.stem for p in UNIT_TESTS])
def test_promtool_unit_tests(path: Path, tmp_path: Path) -> None:
    result = _run("promtool", "test", "rules", str(_with_the_groups_it_tests(path, tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr


def _with_the_groups_it_tests(path: Path, scratch: Path) -> Path:
    """A copy of the unit-test file whose rules are the committed ones less the alert
    groups it names no alert of. promtool evaluates every rule at every step of every
    test (about half of its time here) and judges only the alerts a test names; the
    recording groups stay, since alerts read them, and no rule reads another's ALERTS
    series, so an alert evaluates as it does in the whole file."""
    text = RULES_PATH.read_text()
    assert "ALERTS" not in text, "a rule reads ALERTS: keep every group"
    rules, tests = yaml.safe_load(text), yaml.safe_load(path.read_text())
    named = _alerts_named(tests)
    rules["groups"] = [g for g in rules["groups"]
                       if any("record" in r for r in g["rules"])
                       or named & {r.get("alert") for r in g["rules"]}]
    (scratch / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    tests["rule_files"] = [str(scratch / "rules.yaml")]
    # promtool evaluates the groups of a step in map order, a new one each run, so an
    # alert that reads a recorded series would see it one step late in some runs and
    # not in others (a real Prometheus runs each group on its own phase: one
    # evaluation at most, with or without a lost scrape). The generator's order,
    # recording first, makes each case's step exact and the same every run.
    tests["group_eval_order"] = [g["name"] for g in rules["groups"]]
    copy = scratch / path.name
    copy.write_text(yaml.safe_dump(tests, sort_keys=False))
    return copy


def _alerts_named(tests: dict) -> set[str]:
    """The alerts a promtool unit-test file judges."""
    return {case["alertname"] for group in tests["tests"]
            for case in group.get("alert_rule_test", [])}


def test_the_copy_keeps_the_groups_a_file_tests(tmp_path: Path) -> None:
    """engine.yaml's copy keeps the recording group and the group of every alert it
    names, and drops the rest."""
    path = ALERTS_DIR / "tests" / "engine.yaml"
    named = _alerts_named(yaml.safe_load(path.read_text()))
    copy = _with_the_groups_it_tests(path, tmp_path)
    rules_file = yaml.safe_load(copy.read_text())["rule_files"][0]
    kept = yaml.safe_load(Path(rules_file).read_text())["groups"]
    alerts = {r["alert"] for g in kept for r in g["rules"] if "alert" in r}
    assert "rig-recording" in [g["name"] for g in kept]
    order = yaml.safe_load(copy.read_text())["group_eval_order"]
    assert order[0] == "rig-recording" and order == [g["name"] for g in kept]
    assert named <= alerts
    assert len(kept) < len(yaml.safe_load(RULES_PATH.read_text())["groups"])


def test_every_group_sets_interval() -> None:
    # promtool 2.42 silently evaluates nothing (got: []) without it.
    for file_name, group in _unit_test_groups():
        assert "interval" in group, f"{file_name}: {group.get('name')}"


@pytest.mark.parametrize("name", sorted({r["alert"] for r in _alerts()}))
def test_every_alert_has_firing_and_quiet_cases(name: str) -> None:
    """A firing case with annotations, and quiet cases (for, near miss, absent series)."""
    firing = quiet = 0
    for _, group in _unit_test_groups():
        for case in group.get("alert_rule_test", []):
            if case["alertname"] != name:
                continue
            expected = case.get("exp_alerts") or []
            firing += any("description" in a.get("exp_annotations", {}) for a in expected)
            quiet += not expected
    assert firing >= 1 and quiet >= 3, f"{name}: {firing} firing, {quiet} quiet cases"


def test_amtool_check_config() -> None:
    result = _run("amtool", "check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("name", "severity"), sorted({(r["alert"], r["labels"]["severity"]) for r in _alerts()})
)
def test_amtool_routes_each_alert_by_severity(name: str, severity: str) -> None:
    result = _run(
        "amtool",
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER}",
        f"--verify.receivers={RECEIVERS[severity]}",
        f"severity={severity}",
        f"alertname={name}",
        "instance=rig:9835",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_engine_down_inhibits_that_engines_decode_and_probe_alerts() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    silenced = set()
    for rule in config["inhibit_rules"]:
        if rule["source_matchers"] == ['alertname="RigEngineDown"']:
            assert {"instance", "engine"} <= set(rule["equal"])
            pattern = re.search(r'alertname=~"([^"]+)"', rule["target_matchers"][0])
            assert pattern
            silenced |= {n for n in _names() if re.fullmatch(pattern.group(1), n)}
    assert {"RigDecodeStarvation", "RigEngineWedged", "RigExporterSourceDown"} <= silenced


def test_inhibit_rules_name_real_alerts() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            for names in re.findall(r'alertname=~?"([^"]+)"', matcher):
                assert set(names.split("|")) <= _names(), matcher


def _names() -> set[str]:
    return {r["alert"] for r in _alerts()}


def _routes(route: dict[str, Any]) -> list[dict[str, Any]]:
    return [route, *(r for child in route.get("routes", []) for r in _routes(child))]


def test_every_route_groups_by_signal() -> None:
    """Two rules of one alert differ only in `signal`: without it in the group
    key, the second waits out group_interval (5 min)
    instead of group_wait (docs/alerts.md#routing-and-inhibition)."""
    config = yaml.safe_load(ALERTMANAGER.read_text())
    for route in _routes(config["route"]):
        if "group_by" in route:
            assert {"instance", "alertname", "signal"} <= set(route["group_by"]), route


def test_pages_are_one_alert_each() -> None:
    # Every label that tells apart two critical alerts of one rule is in the key.
    config = yaml.safe_load(ALERTMANAGER.read_text())
    pager = next(r for r in config["route"]["routes"] if r["receiver"] == "rig-pager")
    assert {"engine", "card"} <= set(pager["group_by"])


def test_a_wedged_engine_silences_its_starvation() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    rule = next(r for r in config["inhibit_rules"]
                if r["source_matchers"] == ['alertname="RigEngineWedged"'])
    assert {"instance", "engine"} <= set(rule["equal"])
    assert "RigDecodeStarvation" in rule["target_matchers"][0]


def test_templates_load() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    for pattern in config["templates"]:
        assert list(ALERTMANAGER.parent.glob(pattern)), pattern

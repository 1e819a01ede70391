"""The notification templates, rendered by amtool 0.25 for one alert of each family.

The annotations are the ones promtool checks in `alerts/tests/*.yaml` (the first
firing case of each file), so the text rendered here is what a rule produces.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "alerts" / "templates"
FAMILIES = ("engine", "hicache", "gpu", "host")
# A phone shows about this much of a notification's title.
TITLE_MAX = 72


def first_firing_case(family: str) -> dict[str, Any]:
    tests = yaml.safe_load((REPO / "alerts" / "tests" / f"{family}.yaml").read_text())["tests"]
    for group in tests:
        for case in group.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                if "description" in alert.get("exp_annotations", {}):
                    labels = {"alertname": case["alertname"], **alert["exp_labels"]}
                    return {"labels": labels, "annotations": alert["exp_annotations"]}
    raise AssertionError(f"no firing case in {family}.yaml")


def template_data(alert: dict[str, Any], status: str, rig: str | None = None) -> dict[str, Any]:
    """Alertmanager's template data (the webhook payload has the same shape)."""
    labels = dict(alert["labels"], **({"rig": rig} if rig else {}))
    return {
        "receiver": "rig-pager",
        "status": status,
        "alerts": [{
            "status": status,
            "labels": labels,
            "annotations": alert["annotations"],
            "startsAt": "2026-12-01T05:00:00Z",
            "endsAt": "2026-12-01T05:10:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
            "generatorURL": "http://127.0.0.1:9090/graph",
            "fingerprint": "0123456789abcdef",
        }],
        "groupLabels": {"alertname": labels["alertname"]},
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": "http://127.0.0.1:9093",
    }


def render(data: dict[str, Any], definition: str, tmp_path: Path) -> str:
    amtool = shutil.which("amtool")
    assert amtool, "amtool not found: apt-get install prometheus-alertmanager"
    payload = tmp_path / "data.json"
    payload.write_text(json.dumps(data))
    result = subprocess.run(
        [amtool, "template", "render", f"--template.glob={TEMPLATES}/*.tmpl",
         f"--template.text={{{{ template \"{definition}\" . }}}}",
         f"--template.data={payload}"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("family", FAMILIES)
def test_title_names_rig_alert_and_subject(family: str, tmp_path: Path) -> None:
    alert = first_firing_case(family)
    title = render(template_data(alert, "firing", rig="garage"), "rig.title", tmp_path).strip()
    labels = alert["labels"]
    assert title.startswith(labels["severity"].upper() + " garage " + labels["alertname"]), title
    subject = labels.get("card") or labels.get("engine") or labels.get("sensor") or "host"
    assert subject in title, title
    assert "\n" not in title and len(title) <= TITLE_MAX, title


@pytest.mark.parametrize("family", FAMILIES)
def test_message_has_value_threshold_first_look_and_runbook(family: str, tmp_path: Path) -> None:
    alert = first_firing_case(family)
    message = render(template_data(alert, "firing"), "rig.message", tmp_path)
    notes = alert["annotations"]
    # The title falls back to the instance when targets carry no `rig` label.
    assert message.splitlines()[0].split()[1] == alert["labels"]["instance"]
    assert notes["description"] in message  # the value, against its threshold
    assert f"Rule: {notes['summary']}" in message
    assert f"Look first: {notes['look_first']}" in message
    assert f"Runbook: {notes['runbook_url']}" in message
    assert "<no value>" not in message


def test_resolved_title_and_text(tmp_path: Path) -> None:
    alert = first_firing_case("engine")
    message = render(template_data(alert, "resolved"), "rig.message", tmp_path)
    assert message.startswith("RESOLVED rig:9835 RigDecodeStarvation engine main\n"), message
    assert "Resolved: " + alert["annotations"]["description"] in message


def test_every_alert_says_what_to_look_at_first() -> None:
    rules = yaml.safe_load((REPO / "alerts" / "rig-rules.yaml").read_text())["groups"]
    for rule in (r for g in rules for r in g["rules"] if "alert" in r):
        look = rule["annotations"]["look_first"]
        assert look and len(look) <= 120 and "\n" not in look, rule["alert"]

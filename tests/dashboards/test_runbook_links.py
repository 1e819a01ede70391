"""Each alert's runbook entry links to a dashboard panel that shows that alert."""

from __future__ import annotations

import re

import pytest
import yaml

from alerts.generate import RULES_PATH
from tests.dashboards.queries import alerts_shown, committed, panel_link, panels

RUNBOOK = RULES_PATH.with_name("RUNBOOK.md")
ALERTS = sorted({rule["alert"] for group in yaml.safe_load(RULES_PATH.read_text())["groups"]
                 for rule in group["rules"] if "alert" in rule})


def _section(alert: str) -> str:
    text = RUNBOOK.read_text()
    found = re.search(rf"^## {alert}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"RUNBOOK.md has no section for {alert}"
    return found.group(1)


@pytest.mark.parametrize("alert", ALERTS)
def test_runbook_entry_links_to_a_panel_showing_the_alert(alert: str) -> None:
    showing = {panel_link(d, p) for d in committed() for p in panels(d)
               if alert in alerts_shown(p)}
    assert showing, f"no panel description says it shows {alert}"
    linked = re.findall(r"^\*Dashboard:\* (.+)$", _section(alert), re.M)
    assert linked and set(linked) <= showing, (
        f"{alert}: the runbook links {linked}; panels that show it: {sorted(showing)}")


def test_every_alert_is_shown_on_the_overview() -> None:
    overview = next(d for d in committed() if d["uid"] == "rig-overview")
    shown = {a for p in panels(overview) for a in alerts_shown(p)}
    assert shown == set(ALERTS)

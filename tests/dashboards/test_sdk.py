"""The committed dashboards load in grafana-foundation-sdk's dashboard model, an
independent check beside the linter emulation (tests/dashboards/lint.py): Grafana's
own schema, as its Python SDK generates it, reads every panel, its options and its
Prometheus queries, and writes them back unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import prometheus
from grafana_foundation_sdk.models.dashboard import Dashboard
from grafanalib._gen import DashboardEncoder

from dashboards.generate import _load, sources
from tests.dashboards.queries import committed, panels

plugins.register_default_plugins()
DASHBOARDS = {d["title"]: d for d in committed()}
# Panel types whose options the SDK models (the others stay a plain mapping).
MODELLED = {"stat", "timeseries", "heatmap", "state-timeline"}


def _loaded(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The dashboard through the SDK's model and back to JSON."""
    return json.loads(json.dumps(Dashboard.from_json(dashboard), cls=JSONEncoder))


@pytest.mark.parametrize("title", sorted(DASHBOARDS))
def test_committed_dashboard_loads_in_the_sdk_model(title: str) -> None:
    dashboard = DASHBOARDS[title]
    model = Dashboard.from_json(dashboard)
    assert model.uid == dashboard["uid"] and len(model.panels) == len(dashboard["panels"])
    for panel, original in zip(model.panels, dashboard["panels"], strict=True):
        if original["type"] == "row":
            continue
        where = f"{title} › {original['title']}"
        assert all(isinstance(t, prometheus.Dataquery) for t in panel.targets), where
        if original["type"] in MODELLED:
            assert not isinstance(panel.options, dict), f"{where}: options not modelled"
    written = _loaded(dashboard)
    for before, after in zip(panels(dashboard), panels(written), strict=True):
        where = f"{title} › {before['title']}"
        assert after["gridPos"] == before["gridPos"], where
        assert [(t["refId"], t["expr"], t.get("instant", False)) for t in after.get(
            "targets", [])] == [(t["refId"], t["expr"], t.get("instant", False))
                                for t in before.get("targets", [])], where
        if before["type"] != "row":
            was, now = before["fieldConfig"], after["fieldConfig"]
            assert now.get("overrides", []) == was.get("overrides", []), where
            assert (now["defaults"].get("thresholds")
                    == was["defaults"].get("thresholds")), where


def test_the_sdk_refuses_grafanalibs_raw_output() -> None:
    """What the check catches: grafanalib's JSON as it writes it, nulls and all
    (dashboards/clean.py takes them out)."""
    raw = json.loads(json.dumps(_load(sources()[0]).dashboard.to_json_data(),
                                cls=DashboardEncoder))
    with pytest.raises((TypeError, AttributeError)):
        Dashboard.from_json(raw)

"""deploy/grafana: the data source and dashboards provider files, and what
docs/dashboards.md tells a user to do with them, agree with the dashboards."""

from __future__ import annotations

from pathlib import Path

import yaml

from dashboards.panels import UIDS
from tests.dashboards.queries import committed

REPO = Path(__file__).resolve().parents[2]
PROVISIONING = REPO / "deploy" / "grafana" / "provisioning"


def _load(relative: str) -> dict:
    return yaml.safe_load((PROVISIONING / relative).read_text())


def test_datasource_file() -> None:
    (source,) = _load("datasources/rig-prometheus.yaml")["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    assert source["url"].startswith("http://127.0.0.1:")
    # $__rate_interval is derived from it (docs/facts/tooling.md#grafanas-rate-interval).
    assert source["jsonData"]["timeInterval"].endswith("s")


def test_dashboards_provider_points_at_the_folder_the_docs_fill() -> None:
    (provider,) = _load("dashboards/rig.yaml")["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    manual = (REPO / "docs" / "dashboards.md").read_text()
    assert f"sudo cp dashboards/*.json {path}/" in manual
    assert f"--out {path}" in manual
    assert "deploy/grafana/provisioning/dashboards/rig.yaml" in manual


def test_dashboards_import_cleanly() -> None:
    dashboards = committed()
    assert sorted(d["uid"] for d in dashboards) == sorted(UIDS.values())
    for d in dashboards:
        # No id and no __inputs: Grafana creates it on import with no questions.
        assert d.get("id") is None and d.get("__inputs", []) == [], d["title"]
        assert d["tags"] == ["rig"], d["title"]


def test_overview_links_reach_every_other_dashboard() -> None:
    overview = next(d for d in committed() if d["uid"] == UIDS["overview"])
    urls = {link["url"] for p in overview["panels"] for link in p.get("links", [])}
    targets = {url.split("?")[0].removeprefix("/d/") for url in urls}
    assert targets == set(UIDS.values()) - {UIDS["overview"]}


def test_datasource_time_interval_is_the_scrape_interval() -> None:
    (source,) = _load("datasources/rig-prometheus.yaml")["datasources"]
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    (job,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == "rig"]
    interval = job.get("scrape_interval", prometheus["global"]["scrape_interval"])
    assert source["jsonData"]["timeInterval"] == interval

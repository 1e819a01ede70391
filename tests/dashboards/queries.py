"""The committed dashboards' JSON as (dashboard, panel, query) rows, for the tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dashboards.generate import json_path, sources


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref: str
    expr: str

    @property
    def where(self) -> str:
        return f"dashboard {self.dashboard!r}, panel {self.panel!r}, query {self.ref}"


def committed() -> list[dict[str, Any]]:
    return [json.loads(json_path(source).read_text()) for source in sources()]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def panel_queries() -> list[PanelQuery]:
    return [
        PanelQuery(d["title"], p["title"], t["refId"], t["expr"])
        for d in committed() for p in panels(d) for t in p.get("targets", [])
    ]


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def substitute(expr: str, rate_interval: str, interval: str | None = None,
               time_range: str = "1h", **values: str) -> str:
    """What Grafana sends with every variable on All (`.+`) but those in `values`, and
    the given rate interval, interval (the rate interval unless given) and time range."""
    builtins = {"__rate_interval": rate_interval, "__interval": interval or rate_interval,
                "__range": time_range}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return builtins.get(name) or values.get(name, ".+")
    return _VARIABLE.sub(value, expr)


GRAFANA_URL = "http://localhost:3000"  # Grafana's default address; the runbook links assume it
_SHOWS = re.compile(r"Shows: ([\w, ]+)\.$")


def alerts_shown(panel: dict[str, Any]) -> list[str]:
    """The alerts a panel's description says it shows ("... Shows: RigGpuHot, RigCpuHot.")."""
    found = _SHOWS.search(panel.get("description") or "")
    return found.group(1).split(", ") if found else []


def panel_link(dashboard: dict[str, Any], panel: dict[str, Any]) -> str:
    return (f"[{dashboard['title']} › {panel['title']}]"
            f"({GRAFANA_URL}/d/{dashboard['uid']}?viewPanel={panel['id']})")

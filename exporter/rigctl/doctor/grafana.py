"""Grafana checks (--grafana URL): the five rig dashboards present, and each
Prometheus data source's `timeInterval` equal to the exporter's scrape interval.

Grafana's HTTP API, as its documentation gives it: `GET /api/search?type=dash-db`
lists dashboards (`uid`, `title`, ...), `GET /api/datasources` the data sources
(`name`, `type`, `url`, `jsonData.timeInterval`). Both take a viewer's token
(`Authorization: Bearer`, --grafana-token-file) unless anonymous access is on.
`$__rate_interval`, in every rate() of the dashboards, is at least four times
`timeInterval`; Grafana assumes 15s when it is not set.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from alerts.rules.common import dur
from alerts.timescale import seconds
from exporter.grafana_uids import DASHBOARD_UIDS as UIDS
from exporter.rigctl.client.http import Access, Unreachable, get_json, items
from exporter.rigctl.doctor.context import Context
from exporter.rigctl.doctor.report import Check, fail, ok, skip, warn

#: Grafana's own default for a Prometheus data source without timeInterval.
DEFAULT_TIME_INTERVAL = "15s"
DATASOURCE_FILE = "deploy/grafana/provisioning/datasources/rig-prometheus.yaml"


@dataclass(frozen=True)
class TokenAccess(Access):
    """Grafana's API with a service account token (never printed)."""

    token: str = ""

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def grafana_checks(c: Context, grafana: str, access: Access, prometheus: str | None,
                   scrape_interval_seconds: float | None) -> list[Check]:
    out = []
    for judge in (lambda: _dashboards(c, grafana, access),
                  lambda: _time_interval(c, grafana, access, prometheus,
                                         scrape_interval_seconds)):
        try:
            out.append(judge())
        except Unreachable as exc:
            out.append(fail("grafana", "rig", f"cannot read Grafana's API: {exc}",
                            "check --grafana, and --grafana-token-file (a viewer's token)"))
            break
    return out


def _dashboards(c: Context, grafana: str, access: Access) -> Check:
    url = grafana + "/api/search?type=dash-db&limit=5000"
    found = {str(d.get("uid")): str(d.get("title", "")) for d in
             items(url, get_json(url, c.timeout, access))}
    missing = [uid for uid in UIDS.values() if uid not in found]
    if missing:
        return fail("grafana_dashboards", "rig", f"{grafana} lacks {len(missing)} of the "
                    f"{len(UIDS)} rig dashboards: {', '.join(missing)}",
                    "provision dashboards/*.json (deploy/grafana/provisioning/dashboards/"
                    "rig.yaml), or import them")
    return ok("grafana_dashboards", "rig", f"{grafana} has the {len(UIDS)} rig dashboards: "
              + ", ".join(found[uid] or uid for uid in UIDS.values()))


def _time_interval(c: Context, grafana: str, access: Access, prometheus: str | None,
                   scrape: float | None) -> Check:
    url = grafana + "/api/datasources"
    sources = [d for d in items(url, get_json(url, c.timeout, access))
               if d.get("type") == "prometheus"]
    if not sources:
        return fail("grafana_time_interval", "rig", f"{grafana} has no Prometheus data "
                    "source", f"provision {DATASOURCE_FILE}")
    if scrape is None:
        return skip("grafana_time_interval", "rig", "the exporter's scrape interval is "
                    "unknown, so timeInterval cannot be compared",
                    "give --prometheus too (the Prometheus that scrapes the exporter)")
    if prometheus is not None:  # the data sources that query that Prometheus, if named so
        netloc = urlsplit(prometheus).netloc
        sources = [d for d in sources if urlsplit(str(d.get("url", ""))).netloc == netloc] \
            or sources
    wrong, right = [], []
    for source in sources:
        interval = (source.get("jsonData") or {}).get("timeInterval") or DEFAULT_TIME_INTERVAL
        name = str(source.get("name", source.get("uid", "?")))
        try:
            equal = seconds(str(interval)) == scrape
        except ValueError:
            equal = False
        (right if equal else wrong).append(f"{name!r} {interval}")
    if wrong:
        return warn("grafana_time_interval", "rig", f"Prometheus scrapes the exporter every "
                    f"{dur(scrape)}, but the data source timeInterval is "
                    f"{', '.join(wrong)}: $__rate_interval then spans the wrong number of "
                    "samples", f"set jsonData.timeInterval: {dur(scrape)} on that data "
                    f"source ({DATASOURCE_FILE})")
    return ok("grafana_time_interval", "rig", f"data source timeInterval {', '.join(right)}, "
              f"equal to the scrape interval")

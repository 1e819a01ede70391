"""The rig dashboards' Grafana uids, by the name of their `<name>.dashboard.py`.

Written here, in the spine, because three readers need them and only one of them
builds dashboards: the dashboards themselves (their uid and their links to each
other), and `rigctl doctor --grafana`, which looks for them in Grafana's search API
and must not need grafanalib to do so.
"""

from __future__ import annotations

DASHBOARD_UIDS = {
    "overview": "rig-overview",
    "decode": "rig-decode",
    "hicache": "rig-hicache",
    "gpus": "rig-gpus",
    "host": "rig-host",
    "agents": "rig-agents",
}

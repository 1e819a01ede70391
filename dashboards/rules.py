"""The alert rules' own expressions, for the overview's tiles.

A tile whose alert has several conditions (HiCache thrash, L3 misses, a thermal
downclock, a power cap) shows the rule's expression itself, every threshold and
window as generated from the table (exporter/thresholds.py), with the dashboard's
variables added to each selector: its value is there exactly while the rule's
condition holds (before its `for`), and nothing is typed twice.
"""

from __future__ import annotations

from alerts.generate import ALERT_GROUPS
from alerts.rules.common import Alert
from alerts.selectors import rewrite_selectors
from dashboards.panels import sel
from exporter.thresholds import Thresholds


def alert(t: Thresholds, name: str, signal: str = "", severity: str = "") -> Alert:
    found = [a for _, alerts in ALERT_GROUPS for a in alerts(t)
             if a.name == name and a.signal == signal and severity in ("", a.severity)]
    if len(found) != 1:
        raise ValueError(f"{len(found)} rules {name} (signal {signal!r}, severity"
                         f" {severity!r}), not one")
    return found[0]


def rule_expr(t: Thresholds, name: str, signal: str = "", severity: str = "") -> str:
    """The rule's expression with the dashboard's matchers on every selector."""
    return scoped(alert(t, name, signal, severity).expr.strip())


def scoped(expr: str) -> str:
    """`expr` with `sel()`'s matchers (job, instance, rig; card, engine) on each selector."""
    return rewrite_selectors(expr, lambda name, matchers: sel(name, *matchers))

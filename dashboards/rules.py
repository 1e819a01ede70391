"""The alert rules' own expressions, for the overview's tiles.

A tile whose alert has several conditions (HiCache thrash, L3 misses, a thermal
downclock, a power cap) shows the rule's expression itself, every threshold and
window as generated from the table (exporter/thresholds.py), with the dashboard's
variables added to each selector: its value is there exactly while the rule's
condition holds (before its `for`), and nothing is typed twice.
"""

from __future__ import annotations

import re

from alerts.generate import ALERT_GROUPS
from alerts.rules.common import Alert
from dashboards.panels import sel
from exporter.thresholds import Thresholds

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "count", "group", "stddev",
    "stdvar", "topk", "bottomk", "quantile", "count_values",
}
# A name (metric or recorded series) not part of another token, its {...}, and not a
# function (a name followed by "(").
_SELECTOR = re.compile(r"(?<![\w:$.])([a-zA-Z_]\w*(?::\w+)*)(?![\w:])\s*(\{[^}]*\})?(?!\s*\()")
_MATCHER = re.compile(r'\w+\s*(?:=~|!~|!=|=)\s*"[^"]*"')
_LABEL_LISTS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


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


def _blank(text: str, pattern: str | re.Pattern[str]) -> str:
    return re.sub(pattern, lambda m: " " * len(m.group(0)), text)


def scoped(expr: str) -> str:
    """`expr` with `sel()`'s matchers (job, instance, rig; card, engine) on each selector."""
    masked = _blank(_blank(expr, r'"[^"]*"'), _LABEL_LISTS)
    out, last = [], 0
    for match in _SELECTOR.finditer(masked):
        name = match.group(1)
        if name.lower() in _KEYWORDS:
            continue
        braces = expr[match.start(2):match.end(2)] if match.group(2) else ""
        out += [expr[last:match.start()], sel(name, *_MATCHER.findall(braces))]
        last = match.end(2) if match.group(2) else match.end(1)
    return " ".join("".join([*out, expr[last:]]).split())

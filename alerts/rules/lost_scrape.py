"""Carry every series an alert reads over one lost scrape.

A scrape that fails (the exporter got no CPU for a few seconds, the scrape timed
out) leaves every series of the job without a sample at that step: Prometheus
writes a staleness marker on each and `up` 0, so an instant selector reads nothing
until the next scrape. An alert held by `for` then restarts its hold, and one lost
scrape in ten minutes keeps a ten-minute warning from ever firing.

So an alert with a `for` reads each series as its last sample within the bridge
window (`last_over_time`): range selectors skip staleness markers, so the sample
before the lost scrape stands in for it until the next one comes. A lost scrape adds
no sample, so it can neither make a condition true nor keep one true once a sample
says it ended; a series gone for good lingers for the window (alerts/RUNBOOK.md#a-lost-scrape).

Ranges (rate, increase, max_over_time) need nothing: a range holds the samples
around a lost one.
"""

from __future__ import annotations

import dataclasses
import re

from alerts.rules.common import Alert, dur
from exporter.thresholds import Thresholds

# A metric (`rig_*`) or a recorded series (`level:metric:operation`), not part of a
# longer name.
_NAME = re.compile(r"(?<![\w:])(?:[a-z_]+:[a-z0-9_]+:[a-z0-9_]+|rig_[a-z0-9_]+)(?![\w:])")
_OFFSET = re.compile(r"\s+offset\s+[0-9a-z.]+")


def bridged(expr: str, window: str) -> str:
    """`expr` with each instant selector `x{...} [offset d]` read as
    `last_over_time(x{...}[window] [offset d])`; range selectors and function
    calls are left as they are."""
    out: list[str] = []
    at = 0
    for match in _NAME.finditer(expr):
        if match.start() < at:
            continue  # inside a selector already taken (a label value)
        end = match.end()
        if end < len(expr) and expr[end] == "{":
            end = expr.index("}", end) + 1
        rest = expr[end:].lstrip()
        if rest[:1] in ("[", "("):  # a range selector, or a function's name
            continue
        offset = _OFFSET.match(expr, end)
        selector = expr[match.start():end]
        shift = offset.group(0) if offset else ""
        out.append(expr[at:match.start()])
        out.append(f"last_over_time({selector}[{window}]{shift})")
        at = offset.end() if offset else end
    out.append(expr[at:])
    return "".join(out)


def held(alert: Alert, t: Thresholds) -> Alert:
    """An alert with a `for` that reads its series over a lost scrape; one without
    a hold has none to restart and is left as it is."""
    if not alert.for_seconds:
        return alert
    return dataclasses.replace(alert, expr=bridged(alert.expr,
                                                   dur(t.lost_scrape_bridge_seconds)))

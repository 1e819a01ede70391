"""Rows of the end-to-end timing table, filled by the scenario tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    scenario: str
    alert: str
    received: int  # firing notifications of this alert
    after_fault_seconds: float | None  # wall time, compressed
    rule_for_seconds: float  # the committed rule's `for`, in the rig's time
    group_wait_seconds: float  # the route's group_wait, in the rig's time
    time_scale: float
    resolved: int


ROWS: list[Row] = []


def table() -> list[str]:
    lines = ["| scenario | alert | received | from fault (rig time) | for + group_wait |"
             " resolutions |", "|---|---|---|---|---|---|"]
    for r in ROWS:
        after = ("-" if r.after_fault_seconds is None
                 else f"{r.after_fault_seconds * r.time_scale:.0f} s"
                      f" ({r.after_fault_seconds:.1f} s wall)")
        lines.append(f"| {r.scenario} | {r.alert} | {r.received} | {after} |"
                     f" {r.rule_for_seconds:g} + {r.group_wait_seconds:g} s | {r.resolved} |")
    return lines

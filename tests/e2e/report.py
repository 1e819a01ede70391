"""Rows of the end-to-end timing table, filled by the scenario tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    scenario: str
    alert: str
    received: int  # firing notifications of this alert
    after_fault_seconds: float | None  # wall time
    rule_for_seconds: float  # the committed rule's `for`, in the rig's time
    group_wait_seconds: float  # the route's group_wait, in the rig's time
    time_scale: float
    resolved: int


ROWS: list[Row] = []


def table() -> list[str]:
    """Wall seconds, and the rig's seconds (x time scale) in brackets."""
    lines = ["| scenario | alert | pages | fault -> page | for + group_wait | resolutions |",
             "|---|---|---|---|---|---|"]
    for r in ROWS:
        scale = r.time_scale
        after = ("-" if r.after_fault_seconds is None
                 else f"{r.after_fault_seconds:.1f} s ({r.after_fault_seconds * scale:.0f} s)")
        due = r.rule_for_seconds / scale + r.group_wait_seconds / scale
        lines.append(f"| {r.scenario} | {r.alert} | {r.received} | {after} |"
                     f" {due:.1f} s ({r.rule_for_seconds:g} + {r.group_wait_seconds:g} s) |"
                     f" {r.resolved} |")
    return lines

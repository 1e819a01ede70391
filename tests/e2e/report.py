"""Rows of the end-to-end timing table: each scenario test records its rows on its
report (`record`), and the session's summary collects them from every report, so
the table also reaches the terminal from pytest-xdist's workers (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import pytest

# The name of a row among a test report's user_properties.
PROPERTY = "e2e_timing_row"


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


def record(request: pytest.FixtureRequest, rows: Iterable[Row]) -> None:
    """Rows onto the test's report, as plain dicts: a worker sends them to the
    controller serialised."""
    request.node.user_properties.extend((PROPERTY, dataclasses.asdict(r)) for r in rows)


def rows_of(report: pytest.TestReport) -> list[Row]:
    return [Row(**value) for name, value in report.user_properties if name == PROPERTY]


def table(rows: Iterable[Row]) -> list[str]:
    """Wall seconds, and the rig's seconds (x time scale) in brackets."""
    lines = ["| scenario | alert | pages | fault -> page | for + group_wait | resolutions |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        scale = r.time_scale
        after = ("-" if r.after_fault_seconds is None
                 else f"{r.after_fault_seconds:.1f} s ({r.after_fault_seconds * scale:.0f} s)")
        due = r.rule_for_seconds / scale + r.group_wait_seconds / scale
        lines.append(f"| {r.scenario} | {r.alert} | {r.received} | {after} |"
                     f" {due:.1f} s ({r.rule_for_seconds:g} + {r.group_wait_seconds:g} s) |"
                     f" {r.resolved} |")
    return lines

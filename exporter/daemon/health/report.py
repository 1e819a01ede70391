"""What a health check says, and the verdict over all of them (the /api/health JSON).

A `Signal` is one rule's condition judged now; the monitor turns it into a
`Check` by applying the rule's hold time (`for`) as the exporter has watched it,
which also gives the state the mirrored alert would be in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from exporter.daemon.health.document import AgentLine, CheckLine, HealthReport, HealthStatus, State

# A rule's severity when it fires; info (RigGpuPowerCapped) is expected, not trouble.
SEVERITY_STATUS = {"critical": HealthStatus.CRIT, "warning": HealthStatus.WARN,
                   "info": HealthStatus.OK}


@dataclass(frozen=True)
class Stage:
    """One severity of a rule and its hold time: the rule fires once its
    condition has held for `hold_seconds`."""

    severity: str
    hold_seconds: float


@dataclass(frozen=True)
class Signal:
    """One rule's condition, judged on the present snapshot and the history.

    `holds` is None when it cannot be told (a window not yet filled, a reading
    missing); then `reason` says why. `stages` come from the rule, mildest first.
    """

    check: str
    labels: dict[str, str]
    alert: str
    stages: tuple[Stage, ...]
    holds: bool | None
    value: float | None
    threshold: float | None
    unit: str
    reason: str
    signal: str = ""  # tells apart two conditions of one check (as the rules' `signal`)
    #: The hold is part of the condition: a queue, a full KV pool or L2 pool, a long
    #: prefill with none running are normal moments of a busy rig; only lasting
    #: for the rule's `for` makes them trouble.
    sustained: bool = False


@dataclass(frozen=True)
class Check:
    name: str
    status: HealthStatus
    value: float | None
    threshold: float | None
    unit: str
    reason: str
    labels: dict[str, str] = field(default_factory=dict)
    alert: str = ""
    signal: str = ""  # which of the check's conditions this line reports
    state: State | None = None  # None when the condition cannot be told

    def line(self) -> CheckLine:
        return CheckLine(name=self.name, status=self.status, value=self.value,
                         threshold=self.threshold, unit=self.unit, reason=self.reason,  # type: ignore[arg-type]
                         labels=self.labels, alert=self.alert, signal=self.signal,
                         state=self.state)

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self.line())


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]
    time: float  # Unix seconds of the snapshot judged
    watched_seconds: float  # how much history the windows had
    #: Per tapped engine and agent: its requests in flight, context and stalls
    #: (exporter/daemon/health/agents.py).
    agents: tuple[AgentLine, ...] = ()

    @property
    def status(self) -> HealthStatus:
        """The worst of warn and crit; else ok if anything is ok; else unknown."""
        worst = max((c.status for c in self.checks), key=lambda s: s.rank, default=None)
        if worst in (HealthStatus.CRIT, HealthStatus.WARN):
            return worst
        if any(c.status is HealthStatus.OK for c in self.checks):
            return HealthStatus.OK
        return HealthStatus.UNKNOWN

    def to_json(self) -> dict[str, Any]:
        """The /api/health document (exporter/daemon/health/document.py)."""
        return msgspec.to_builtins(HealthReport(
            status=self.status, time=self.time, watched_seconds=self.watched_seconds,
            checks=[c.line() for c in self.checks], agents=list(self.agents)))


def worst_first(checks: list[Check]) -> tuple[Check, ...]:
    return tuple(sorted(checks, key=lambda c: (-c.status.rank, c.name,
                                               sorted(c.labels.items()))))

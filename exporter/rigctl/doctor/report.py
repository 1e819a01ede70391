"""What a doctor check says, and the verdict over all of them (`rigctl doctor --json`).

A check says what it looked at (`detail`) and, when it is not ok, the one thing to
change (`fix`). `skip` is a check that could not run here (no --config.file, no
traffic while it watched); skips do not change the exit status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.ranked import Ranked


class DoctorStatus(Ranked):
    """A doctor check's outcome: a setup question, not the rig's health (that is
    exporter/daemon/health/report.py's HealthStatus). Mildest first."""

    OK = "ok"
    SKIP = "skip"
    WARN = "warn"
    FAIL = "fail"


# 3 is the exporter that cannot be reached, before any check (exporter/rigctl/commands/doctor.py).
EXIT_FOR_STATUS = {DoctorStatus.OK: 0, DoctorStatus.SKIP: 0, DoctorStatus.WARN: 1,
                   DoctorStatus.FAIL: 2}


@dataclass(frozen=True)
class Check:
    name: str
    #: What it is about: an engine's name, a card, or "rig".
    subject: str
    status: DoctorStatus
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "status": self.status.value,
                "detail": self.detail, "fix": self.fix}


def ok(name: str, subject: str, detail: str) -> Check:
    return Check(name, subject, DoctorStatus.OK, detail)


def skip(name: str, subject: str, detail: str, fix: str = "") -> Check:
    return Check(name, subject, DoctorStatus.SKIP, detail, fix)


def warn(name: str, subject: str, detail: str, fix: str) -> Check:
    return Check(name, subject, DoctorStatus.WARN, detail, fix)


def fail(name: str, subject: str, detail: str, fix: str) -> Check:
    return Check(name, subject, DoctorStatus.FAIL, detail, fix)


def plural(count: float, noun: str) -> str:
    """`1 request`, `2 requests`."""
    return f"{count:.0f} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class Verdict:
    checks: tuple[Check, ...]
    exporter: str
    watched_seconds: float

    @property
    def status(self) -> DoctorStatus:
        worst = max((c.status for c in self.checks), key=lambda s: s.rank, default=DoctorStatus.OK)
        return DoctorStatus.OK if worst is DoctorStatus.SKIP else worst

    @property
    def exit_code(self) -> int:
        return EXIT_FOR_STATUS[self.status]

    def worst_first(self) -> list[Check]:
        return sorted(self.checks, key=lambda c: -c.status.rank)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "exporter": self.exporter,
                "watched_seconds": round(self.watched_seconds, 3),
                "checks": [c.to_json() for c in self.worst_first()]}

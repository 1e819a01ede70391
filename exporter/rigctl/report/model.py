"""The model: what a report holds, schema 1 (report.schema.json beside this file, and
docs/report.md). Plain data; the renderers (text, JSON, HTML) only read it.

Counters are increases over the range; gauges are maxima over it. None is "the
exporter never said", never a zero.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA = 1
VERDICTS = ("ok", "warn", "crit", "unknown")
VERDICT_OF_SEVERITY = {"critical": "crit", "warning": "warn"}


@dataclass
class Incident:
    alert: str
    severity: str
    labels: dict[str, str]
    start: float
    end: float | None
    seconds: float
    summary: str
    # RigDecodeStarvation only: its longest stall.
    stall_seconds: float | None = None
    # Where the tap has agents: the one stalled most, and the one blamed most.
    agent: str | None = None
    by: str | None = None


@dataclass
class Agent:
    engine: str
    agent: str
    requests: int
    prompt_tokens: int
    cached_prompt_tokens: int | None
    generated_tokens: int
    unbounded_requests: int
    max_token_gap_seconds: float | None
    max_context_tokens: int | None
    starved_seconds: float
    starved_by: dict[str, float]


@dataclass
class Gpu:
    card: str
    max_junction_celsius: float | None
    downclocked_seconds: float
    power_capped_seconds: float


@dataclass
class Engine:
    engine: str
    kind: str
    max_decode_stall_seconds: float | None
    prompt_tokens: int | None
    generated_tokens: int | None
    cache_hit_tokens: dict[str, int | None]


@dataclass
class Blind:
    source: str
    start: float
    end: float | None


@dataclass
class Timeline:
    """What the HTML page draws: (time, value) per subject, one point per bucket."""

    junction: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    sclk: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    kv: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    l2: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    stall: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


@dataclass
class Report:
    start: float
    end: float
    # The bucket, in seconds, and the rules' evaluation step it is a multiple of.
    step: float
    eval_seconds: float
    verdict: str
    incidents: list[Incident]
    agents: list[Agent]
    gpus: list[Gpu]
    engines: list[Engine]
    blind: list[Blind]
    queries: int = 0
    # Only when the HTML page is asked for.
    timeline: Timeline | None = None

    def to_json(self) -> dict[str, Any]:
        """Schema 1: report.schema.json."""
        def incident(i: Incident) -> dict[str, Any]:
            out = {"alert": i.alert, "severity": i.severity, "labels": i.labels,
                   "start": rfc3339(i.start), "end": rfc3339(i.end),
                   "seconds": i.seconds, "summary": i.summary}
            if i.alert == "RigDecodeStarvation":
                out["stall_seconds"] = i.stall_seconds
            if i.agent is not None:
                out["agent"], out["by"] = i.agent, i.by
            return out
        return {
            "schema": SCHEMA, "start": rfc3339(self.start), "end": rfc3339(self.end),
            "step_seconds": self.step,
            "verdict": self.verdict,
            "incidents": [incident(i) for i in self.incidents],
            "agents": [dataclasses.asdict(a) for a in self.agents],
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "engines": [dataclasses.asdict(e) for e in self.engines],
            "blind": [{"source": b.source, "start": rfc3339(b.start), "end": rfc3339(b.end)}
                      for b in self.blind],
        }


def rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

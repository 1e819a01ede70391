"""The /api/health document, declared once as msgspec structs.

The exporter writes it from these (report.py), `rigctl health` decodes its answer
with them (exporter/rigctl/client/health.py), and health.schema.json is written
from them: `python -m exporter.daemon.health.document` rewrites the file, and
tests/daemon/health/test_document.py fails when it is stale.

A reader takes keys it does not know (a newer exporter may add some); the schema
promises that this exporter sends none (`additionalProperties: false`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from exporter.ranked import Ranked

SCHEMA_FILE = Path(__file__).with_name("health.schema.json")
Unit = Literal["s", "ratio", "celsius", "watts", "bytes/s", "tokens/s", "tokens", "requests",
               "count", "cards", "sources", "lanes", "transfers/s", "bool"]
Count = Annotated[int, Meta(ge=0)]
Seconds = Annotated[float, Meta(ge=0)]


class HealthStatus(Ranked):
    """A health check's verdict on the rig, at its rule's severity (not the doctor's
    DoctorStatus, which judges the setup). Mildest first: an unknown check ranks
    above an ok one and below a warning."""

    OK = "ok"
    UNKNOWN = "unknown"
    WARN = "warn"
    CRIT = "crit"


class State(Ranked):
    """The mirrored alert's state in Prometheus' words, as the exporter has watched
    its condition: pending while it holds for less than the rule's `for`."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


def said(text: str) -> Meta:
    return Meta(description=text)


class Part(Struct, frozen=True, kw_only=True):
    """An object of the document."""


class CheckLine(Part):
    """One check: one concern, on one engine, card, tier or source."""

    name: Annotated[str, Meta(pattern="^[a-z][a-z0-9_]*$")]
    status: HealthStatus
    value: Annotated[float | None, said("The observed value, in `unit`; null when unknown.")]
    threshold: Annotated[float | None, said(
        "The threshold it is judged against, in `unit`; null for yes/no checks.")]
    unit: Unit
    reason: Annotated[str, Meta(min_length=1), said(
        "One line: what was seen, naming the engine, card or tier.")]
    labels: dict[str, str]
    alert: Annotated[str, Meta(pattern="^Rig[A-Za-z]+$"), said(
        "The Prometheus alert whose condition and thresholds this check mirrors.")]
    signal: Annotated[str, said(
        "Which of the check's conditions this line reports, when it judges more than one: "
        "the rule's `signal` label where the alert has several rules (usage or "
        "retractions, churn or recompute, probe or queue, vanished or count, available or "
        "stall), else what the one rule reads (tap, stall or probe; a sensor; swap io or "
        "growth; a PCIe link's speed or width and port). The line reports the worst status "
        "and, among equals, the condition whose alert is furthest on (firing, then "
        "pending). Empty for a check of one condition.")]
    state: Annotated[State | None, said(
        "The state the alert would be in, as the exporter has watched the condition: "
        "inactive (it does not hold), pending (it holds, for less than the rule's `for`), "
        "firing. An info alert (RigGpuPowerCapped) fires with status ok. null when the "
        "status is unknown.")]


class Flight(Part):
    """One streaming request in flight."""

    age_seconds: Seconds
    waiting: Annotated[bool, said("Still waiting for its first token.")]
    tokens: Annotated[Count, said(
        "Generated so far, at least (the stream's count, else its frames).")]
    open_gap_seconds: Annotated[float | None, said("Since its last token; null before the first.")]
    bounded: Annotated[bool, said("It set max_tokens, max_completion_tokens or max_new_tokens.")]


class AgentLine(Part):
    """One agent of a tapped engine: what it has in flight, its context, its stalls."""

    engine: str
    agent: Annotated[str, said("A configured agent's name, or `other`.")]
    streams: Annotated[Count, said("Streamed responses in flight.")]
    in_flight: Annotated[list[Flight], said("Its streaming requests in flight, oldest first.")]
    longest_request_seconds: Seconds
    longest_first_token_wait_seconds: Seconds
    last_prompt_tokens: Annotated[int | None, said(
        "The prompt it last sent, as the engine counted it; null until one was reported.")]
    context_ratio: Annotated[float | None, said(
        "The last prompt over the engine's context length; null where either is unknown.")]
    max_gap_seconds: Annotated[Seconds, said(
        "The longest gap of its streams in the window, a gap still open included.")]
    starved_seconds: Annotated[dict[str, float], said(
        "Seconds its streams stood still, by the agent blamed (`none`: nobody waited for a "
        "first token); those above 0.")]
    requests: Annotated[Count, said("Its streaming generation requests so far, every outcome.")]
    unbounded_requests: Count


class FiringAlert(Part):
    """A Rig* alert firing in Prometheus."""

    name: str
    severity: str
    state: Literal["firing", "pending"]
    silenced: Annotated[bool | None, said("null: no Alertmanager was asked.")]
    summary: str
    labels: dict[str, str]


class HealthReport(Part):
    """The exporter's health verdict: one check per concern, worst first. `rigctl health
    --json` prints the same document, with `alerts` added when --prometheus is given."""

    status: Annotated[HealthStatus, said(
        "crit or warn if any check is; else ok if any check is ok; else unknown.")]
    # Before 1e11: a Unix time in seconds, not milliseconds.
    time: Annotated[float, Meta(ge=0, lt=1e11), said("Unix seconds of the snapshot judged.")]
    watched_seconds: Annotated[Seconds, said(
        "How long the exporter has kept history: windowed checks are unknown until it "
        "covers their window.")]
    checks: list[CheckLine]
    agents: Annotated[list[AgentLine] | UnsetType, said(
        "The stream tap's agents ([[engine.agent]], and `other`) per tapped engine: what "
        "each has in flight, its context and its stalls. Empty without a tap; absent "
        "from an older exporter's.")] = UNSET
    alerts: Annotated[list[FiringAlert] | UnsetType, said(
        "Firing Rig* alerts from Prometheus (rigctl health --prometheus only).")] = UNSET
    exporter: Annotated[str | UnsetType, said(
        "Where rigctl read the report (rigctl health --json only).")] = UNSET


def schema() -> dict[str, Any]:
    """health.schema.json: JSON Schema 2020-12 of HealthReport."""
    (root,), parts = msgspec.json.schema_components(
        [HealthReport], ref_template="#/$defs/{name}")
    for part in parts.values():
        if part.get("type") == "object":
            part["additionalProperties"] = False
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/rig-telemetry/rig-telemetry/blob/main/"
               "exporter/daemon/health/health.schema.json",
        "title": "rig telemetry /api/health",
        **root,
        "$defs": parts,
    }


def schema_text() -> str:
    """The schema as committed: an object or a list on one line where it fits in 100
    characters, else one member a line."""
    return _laid(schema(), 0) + "\n"


def _laid(value: Any, indent: int, used: int = 0) -> str:
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or indent + used + len(flat) <= 100:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        members = [f"{pad}{json.dumps(k)}: {_laid(v, indent + 2, len(json.dumps(k)) + 2)}"
                   for k, v in value.items()]
        return "{\n" + ",\n".join(members) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(pad + _laid(v, indent + 2) for v in value) + "\n" + \
        " " * indent + "]"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(schema_text())
    sys.exit(0)

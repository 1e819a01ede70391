"""The alert rules as the report evaluates them: read from the generator at run time
(alerts/generate.py, the same table of thresholds), each recorded series inlined as its
own expression, so that a TSDB the rules never ran on still answers, and the rig's
selection (`--rig`, `--job`, `--instance`) added to every selector.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from alerts.generate import build
from alerts.selectors import rewrite_selectors
from exporter.thresholds import Thresholds

#: The severities that make an incident (an `info` rule, the power cap, is a fact on
#: its card, not an incident).
INCIDENT_SEVERITIES = ("critical", "warning")


@dataclass(frozen=True)
class Rule:
    alert: str
    severity: str
    # The rule's `signal` label, "" for none: it tells two rules of one alert apart.
    signal: str
    # The condition, recorded series inlined and the selection on every selector.
    expr: str
    for_seconds: float
    summary: str


def matchers(rig: str | None = None, job: str | None = None,
             instance: str | None = None) -> list[str]:
    """The selection's label matchers, as PromQL writes them."""
    return [f'{label}="{_escape(value)}"' for label, value in
            (("rig", rig), ("job", job), ("instance", instance)) if value is not None]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


#: An inlined recorded series followed by a range (`last_over_time(recorded[20s])`, the
#: held alerts' bridge over a lost scrape): a parenthesised expression takes a range
#: only as a subquery. A range the generator wrote itself after ")" is one already.
_RANGE_AFTER_INLINED = re.compile(r"\)\s*\[(\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y))\]")


def scoped(expr: str, selection: list[str], records: dict[str, str],
           eval_seconds: float) -> str:
    """`expr` with every recorded series inlined and `selection` on every selector.

    A recorded series' own matchers (headroom{sensor="junction"}) go onto each selector
    of its expression: the recording rules keep those labels, so this picks the same
    series. A range over a recorded series becomes a subquery at the evaluation step,
    the step the recording rule itself would have run at."""
    def selector(name: str, own: list[str]) -> str:
        if name in records:
            return f"({scoped(records[name], [*selection, *own], records, eval_seconds)})"
        return name + "{" + ", ".join([*selection, *own]) + "}"
    return _RANGE_AFTER_INLINED.sub(rf")[\1:{eval_seconds:g}s]",
                                    rewrite_selectors(expr, selector))


def recorded(thresholds: Thresholds, time_scale: float = 1.0,
             stall_scale: float | None = None) -> dict[str, str]:
    groups = build(thresholds, time_scale, stall_scale)["groups"]
    return {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}


def alert_rules(selection: list[str], eval_seconds: float,
                thresholds: Thresholds | None = None, time_scale: float = 1.0,
                stall_scale: float | None = None) -> list[Rule]:
    """Every alert rule the generator writes, ready to evaluate over a range at
    `eval_seconds`, the rules' evaluation step."""
    thresholds = thresholds or Thresholds()
    groups = build(thresholds, time_scale, stall_scale)["groups"]
    records = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    return [Rule(alert=r["alert"], severity=r["labels"]["severity"],
                 signal=r["labels"].get("signal", ""),
                 expr=scoped(r["expr"], selection, records, eval_seconds),
                 for_seconds=parse_duration(r.get("for", "0s")),
                 summary=r["annotations"]["summary"])
            for g in groups for r in g["rules"] if "alert" in r]


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration (`5m`, `1h30m`, `500ms`) or a plain number."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)

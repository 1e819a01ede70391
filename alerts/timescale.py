"""A time-compressed copy of the rules and of the Alertmanager config, for the
end-to-end tests and `rigctl demo`.

With a time scale F, one second of the rig's life passes in 1/F s: every hold
(`for`), every range, subquery step and offset, and the stall lengths compared
against are divided by F; every per-second rate threshold is multiplied by F;
counts, ratios, temperatures and token counts are unchanged. The copy is generated
from the same `Thresholds` as the committed rules: the holds and windows that come
from thresholds are scaled where they land in the rule (its `for` and its ranges),
so each is scaled once.

Its notifications read as the rig's own would: the annotations are the committed
rules' (unscaled thresholds and durations), and an alert whose value is a stall
length or a per-second rate (`Alert.value_kind`) has its expression's result
brought back to the rig's time, so that a 47 s stall pages as about 47 s and not
as the 23.6 s it lasted at a stall scale of 2.

Scaled in the rules only: the look-back of the exporter's longest-stall gauge
(decode_stall_window_seconds), where it lands in their ranges. An exporter judged
by a scaled copy should compress its own too (`[[engine]] stall_window_seconds`,
as `SimRig.exporter_args(compress_stall_window=True)` sets for the end-to-end
tests and the demo), or one stall stays visible for more (scaled) minutes than
it would.

    python -m alerts.generate --time-scale 10 --out /tmp/rig-rules-x10.yaml
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from alerts.rules.common import AGE, PER_SECOND, STALL_LENGTH, Alert, dur, num
from exporter.thresholds import Thresholds

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# A range `[5m]`, a subquery `[10m:1m]`, an `offset 5m` inside PromQL.
_RANGE = re.compile(r"\[([0-9a-z.]+)(?::([0-9a-z.]+))?\]")
_OFFSET = re.compile(r"\boffset ([0-9a-z.]+)")


def seconds(duration: str) -> float:
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def scaled_duration(duration: str, factor: float) -> str:
    return dur(_round(seconds(duration) / factor))


# Durations the rules compare a value against (a stall's length), rather than
# hold for or look back over.
COMPARED_DURATIONS = ("decode_stall_critical_seconds", "decode_stutter_seconds")
# Ages a request's gauge is compared against: they pass at the time scale.
COMPARED_AGES = ("agent_hog_running_seconds", "agent_hog_waiting_seconds")


#: The scrape interval of the Prometheus a time-scaled copy is for (the tests' and the
#: demo's, rigctl/stack.py `Intervals`), real seconds.
SCALED_SCRAPE_SECONDS = 1.0


def scaled_thresholds(t: Thresholds, factor: float,
                      stall_factor: float | None = None,
                      scrape_seconds: float = SCALED_SCRAPE_SECONDS) -> Thresholds:
    """The values compared against: stall lengths divided by F (or by
    `stall_factor`: a loaded test machine's scheduling hiccups must stay below
    the stall threshold), per-second rates multiplied by F. The scrape interval is
    the copy's Prometheus' (`scrape_seconds` real seconds, F times as many of the
    rig's): the window that carries a series over a lost scrape spans as many of
    that Prometheus' scrapes as it spans of the rig's."""
    if factor <= 0 or (stall_factor is not None and stall_factor <= 0):
        raise ValueError(f"time scale must be positive, got {factor!r}, {stall_factor!r}")
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(t):
        value = getattr(t, field.name)
        if field.name.endswith("_per_second"):
            changes[field.name] = value * factor
        elif field.name in COMPARED_DURATIONS:
            changes[field.name] = _round(value / (stall_factor or factor))
        elif field.name in COMPARED_AGES:
            changes[field.name] = _round(value / factor)
    changes["scrape_interval_seconds"] = _round(scrape_seconds * factor)
    return dataclasses.replace(t, **changes)


def scaled_alert(fast: Alert, plain: Alert, factor: float,
                 stall_factor: float | None = None) -> dict[str, Any]:
    """The rule of `fast` (an alert made from `scaled_thresholds`) with the
    annotations of `plain` (the same alert from the unscaled thresholds) and its
    value in the rig's time."""
    rule = fast.rule()
    rule["annotations"] = plain.rule()["annotations"]
    rule = scaled_rule(rule, factor)
    if fast.value_kind == STALL_LENGTH and (stall_factor or factor) != 1.0:
        rule["expr"] = f"(\n{rule['expr']}) * {num(stall_factor or factor)}\n"
    elif fast.value_kind == PER_SECOND and factor != 1.0:
        rule["expr"] = f"(\n{rule['expr']}) / {num(factor)}\n"
    elif fast.value_kind == AGE and factor != 1.0:
        rule["expr"] = f"(\n{rule['expr']}) * {num(factor)}\n"
    return rule


def scaled_rule(rule: dict[str, Any], factor: float) -> dict[str, Any]:
    if factor == 1.0:
        return rule
    rule = dict(rule, expr=scaled_expr(rule["expr"], factor))
    if "for" in rule:
        rule["for"] = scaled_duration(rule["for"], factor)
    return rule


def scaled_expr(expr: str, factor: float) -> str:
    """Every range, subquery step and offset of a PromQL expression, divided by F."""
    def window(match: re.Match[str]) -> str:
        step = match.group(2)
        inner = scaled_duration(match.group(1), factor)
        return f"[{inner}:{scaled_duration(step, factor)}]" if step else f"[{inner}]"

    expr = _RANGE.sub(window, expr)
    return _OFFSET.sub(lambda m: "offset " + scaled_duration(m.group(1), factor), expr)


def scaled_alertmanager(config: dict[str, Any], factor: float) -> dict[str, Any]:
    """The routing tree's group_wait, group_interval and repeat_interval, divided by F."""
    config = dict(config)

    def route(node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in node:
                node[key] = scaled_duration(node[key], factor)
        if "routes" in node:
            node["routes"] = [route(child) for child in node["routes"]]
        return node

    config["route"] = route(config["route"])
    return config


def _round(value: float) -> float:
    """Whole seconds stay whole; below that, milliseconds (Prometheus' finest unit)."""
    return float(round(value)) if value >= 10 else round(value, 3)

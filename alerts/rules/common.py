"""What every rule module shares: label sets, recorded series names, the `Alert`
dataclass and the formatting of durations, numbers and percentages.

Recording rules follow `level:metric:operation`; the level says which labels a
series keeps: `engine` = ENGINE_SERIES (exporter/schema.py); `engine_tier` adds
tier; `card` = CARD_SERIES (+ clock); `card_sensor` adds sensor; `instance` =
TARGET_LABELS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUNBOOK_URL = "https://github.com/rig-telemetry/rig-telemetry/blob/main/alerts/RUNBOOK.md#"

ENGINE_SUBJECT = "Engine {{ $labels.engine }} ({{ $labels.kind }}) on {{ $labels.instance }}"
CARD_SUBJECT = "Card {{ $labels.card }} on {{ $labels.instance }}"
# A count read through increase(), which extrapolates (3 retractions can read
# 3.305): printed as the whole number it stands for.
COUNT = '{{ $value | printf "%.0f" }}'

# What an alert's value is, where a time-scaled copy of the rules must bring it
# back to the rig's time (alerts/timescale.py): the length of a decode stall, a
# counter's rate per second, or the age of a request.
STALL_LENGTH, PER_SECOND, AGE = "stall length", "per second", "age"

# Recorded series shared by the alerts below and the dashboards. `rate_window` is a
# rate over the configured `rate_window_seconds` (5 min by default): the name says
# which window without changing when the owner changes it.
PROMPT_RATE = "engine:rig_engine_prompt_tokens:rate_window"
CHURN_RATE = "engine:rig_engine_hicache_churn_tokens:rate_window"
# Each tier's share of the prompt tokens, and all tiers' together.
HIT_SHARE = "engine_tier:rig_engine_cache_hit_tokens:ratio_rate_window"
ANY_HIT_SHARE = "engine:rig_engine_cache_hit_tokens:ratio_rate_window"
HOST_USAGE = "engine:rig_engine_hicache_host_usage:ratio"
SCLK_RATIO = "card:rig_gpu_sclk:ratio"
HEADROOM = "card_sensor:rig_gpu_temperature_headroom:celsius"
MEM_AVAILABLE = "instance:rig_host_memory_available:ratio"
SWAP_IO = "instance:rig_host_swap_io_bytes:rate_window"


def dur(seconds: float) -> str:
    """Prometheus duration (300 -> 5m); a fraction of a second (a time-scaled
    test copy) is written in milliseconds (0.5 -> 500ms)."""
    if not float(seconds).is_integer():
        return f"{round(seconds * 1000)}ms"
    s = int(seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if s and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def pct(ratio: float) -> str:
    return f"{ratio * 100:g}%"


def missing_hits(window: str) -> str:
    """Prompt tokens that no cache tier served within `window`.

    SGLang creates a tier's labelled hit counter on first use, so an absent
    tier counts as zero hits rather than blanking the expression, and a tier's
    counter born within the window counts whole: increase() never counts a
    counter's first value, and a 64K session restored from L2 at the tier's first
    hit would read as 64K recomputed. Whole only if the prompt counter was read
    before it within the window (more samples): at the start of a history or
    after an exporter restart both first appear together, and increase() misses
    both alike.
    """
    prompts = f"increase(rig_engine_prompt_tokens_total[{window}])"
    hit = "rig_engine_cache_hit_tokens_total"
    born = (f"({hit} unless {hit} offset {window}) and (count_over_time({hit}[{window}])"
            f" < ignoring (tier) group_left () count_over_time("
            f"rig_engine_prompt_tokens_total[{window}]))")
    hits = f"sum without (tier) ({born} or increase({hit}[{window}]))"
    # Matched on every label (no `on`): a one-to-one `on` would drop the target's
    # own labels, such as deploy/'s `rig`.
    return f"({prompts} - ({hits} or {prompts} * 0))"


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    for_seconds: int
    # The rule's own condition, thresholds included: a page's headline.
    summary: str
    # Which card, engine or tier, and the value, against its threshold.
    description: str
    # The one thing to look at first; the runbook has the rest.
    look_first: str
    # Tells apart two rules of one alert (promtool rejects duplicate label sets).
    signal: str = ""
    # STALL_LENGTH, PER_SECOND, AGE, or "" for a value time does not compress (a
    # count, a ratio, a temperature).
    value_kind: str = ""

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr.strip() + "\n"}
        if self.for_seconds:
            rule["for"] = dur(self.for_seconds)
        rule["labels"] = {"severity": self.severity}
        if self.signal:
            rule["labels"]["signal"] = self.signal
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "look_first": self.look_first,
            "runbook_url": RUNBOOK_URL + self.name.lower(),
        }
        return rule

"""From an engine's parsed families to rig_engine_* values: pick the upstream, aggregate ranks.

Ranks (docs/metrics.md#engine-metrics): tensor-parallel ranks hold shards of the same
tokens, so their counters and capacities repeat one logical value; take the max over them, never a
sum (the owner's warning: KV capacity must not double on TP2). Pipeline, expert and
context-parallel ranks, a multiprocess `pid`, and a host `pool` (kv/swa/mamba hold
the same tokens) repeat a value the same way. What is left after that (`dp_rank`,
vLLM's `engine` index, `is_streaming`, tiers' raw sources) are separate parts of a
whole, and add up. Ratios take the max over everything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from exporter.daemon.engines.exposition import Exposition, Family, Sample
from exporter.daemon.engines.mapping import EngineTable, Rule, Upstream

REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_cp_rank", "pid", "pool"})


@dataclass(frozen=True)
class HistogramValue:
    #: (le as the engine wrote it, cumulative count), in bound order, ending with +Inf.
    buckets: tuple[tuple[str, float], ...]
    sum: float


@dataclass
class EngineMetrics:
    """The rig_engine_* values one exposition gave; a family it lacked is absent."""

    values: dict[str, float] = field(default_factory=dict)
    tiers: dict[str, dict[str, float]] = field(default_factory=dict)
    histograms: dict[str, HistogramValue] = field(default_factory=dict)
    #: Why some of the body could not be used, for the log.
    problems: list[str] = field(default_factory=list)


def wanted_names(table: EngineTable, rules: Iterable[Rule]) -> frozenset[str]:
    """The HELP/TYPE names the parser must extract for these rules, under every prefix."""
    return frozenset(prefix + upstream.name
                     for rule in rules for upstream in rule.sources
                     for prefix in table.prefixes)


def normalise(exposition: Exposition, table: EngineTable, tp_size: int = 1) -> EngineMetrics:
    """`tp_size` (from server_info) undoes the multiprocess sum of rank-less families."""
    metrics = EngineMetrics()
    for rule in table.rules:
        found = (_all_upstreams(exposition, table, rule, metrics.problems) if rule.add_sources
                 else _first_upstream(exposition, table, rule, metrics.problems))
        if found is None:
            continue
        upstream, samples = found
        if rule.type == "histogram":
            histogram = _histogram(samples, metrics.problems, upstream.name)
            if histogram is not None:
                metrics.histograms[rule.family] = histogram
        elif upstream.tier_label is not None or upstream.fixed_tier is not None:
            tiers = _aggregate(samples, rule.combine, lambda s, u=upstream: _tier(u, s),
                               _replicas(rule))
            if tiers:
                metrics.tiers[rule.family] = {tier: tiers[tier] for tier in sorted(tiers)}
        else:
            total = _aggregate(samples, rule.combine, lambda s: "", _replicas(rule))
            if total:
                value = total[""]
                if rule.per_tp_rank and tp_size > 1 and not any(
                        "tp_rank" in s.labels for s in samples):
                    value /= tp_size
                metrics.values[rule.family] = value
    for rule in table.rules:
        if rule.reading_if_positive and not metrics.values.get(rule.reading_if_positive, 0) > 0:
            metrics.values.pop(rule.family, None)
    return metrics


def scalar(exposition: Exposition, table: EngineTable, rule: Rule) -> float | None:
    """One scalar rule's value, or None when the engine has not created the family."""
    found = _first_upstream(exposition, table, rule, [])
    if found is None:
        return None
    return _aggregate(found[1], rule.combine, lambda s: "").get("")


def combine_ranks(samples: list[Sample], combine: str = "sum") -> float | None:
    """One value from samples of one family: max over replica ranks, `combine` the rest."""
    return _aggregate(samples, combine, lambda s: "").get("")


def _first_upstream(
    exposition: Exposition, table: EngineTable, rule: Rule, problems: list[str],
) -> tuple[Upstream, list[Sample]] | None:
    for upstream in rule.sources:
        for prefix in table.prefixes:
            family = exposition.families.get(prefix + upstream.name)
            if family is None:
                continue
            if family.type != (upstream.declared_type or rule.type):
                problems.append(f"{prefix}{upstream.name} is a {family.type}, "
                                f"expected a {rule.type}: not used")
                continue
            samples = [s for s in _own_samples(family, upstream.declared_type)
                       if _matches(upstream, s)]
            if upstream.value_label is not None:
                samples = _values_from_label(samples, upstream.value_label)
            if samples:
                return upstream, samples
    return None


def _all_upstreams(
    exposition: Exposition, table: EngineTable, rule: Rule, problems: list[str],
) -> tuple[Upstream, list[Sample]] | None:
    """Every source of the rule the engine exposes, as one list of samples to add up;
    None unless all are there (half a sum is no reading)."""
    taken: list[Sample] = []
    for upstream in rule.sources:
        found = _first_upstream(exposition, table, Rule(rule.family, rule.type, (upstream,)),
                                problems)
        if found is None:
            return None
        taken.extend(found[1])
    return rule.sources[0], taken


def _own_samples(family: Family, declared_type: str | None = None) -> list[Sample]:
    if declared_type is not None:
        return family.samples  # one value however the parser named it
    if family.type == "counter":
        return [s for s in family.samples if s.name.endswith("_total")]
    return family.samples


def _values_from_label(samples: list[Sample], label: str) -> list[Sample]:
    """Info gauges carry numbers in labels; a label that is absent or "None" gives nothing."""
    taken = []
    for sample in samples:
        try:
            value = float(sample.labels.get(label, ""))
        except ValueError:
            continue
        labels = {k: v for k, v in sample.labels.items() if k == "engine"}
        taken.append(Sample(sample.name, labels, value))
    return taken


def _matches(upstream: Upstream, sample: Sample) -> bool:
    return all(_regex(pattern).fullmatch(sample.labels.get(label, ""))
               for label, pattern in upstream.where.items())


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _replicas(rule: Rule) -> frozenset[str]:
    return REPLICA_LABELS - {"tp_rank"} if rule.add_tp_ranks else REPLICA_LABELS


def _tier(upstream: Upstream, sample: Sample) -> str | None:
    if upstream.fixed_tier is not None:
        return upstream.fixed_tier
    raw = sample.labels.get(upstream.tier_label or "", "")
    if not upstream.tiers:
        return raw or None
    return next((tier for pattern, tier in upstream.tiers if _regex(pattern).fullmatch(raw)),
                None)


def _aggregate(samples: list[Sample], combine: str, key_of,
               replicas: frozenset[str] = REPLICA_LABELS) -> dict[str, float]:
    """Max over replica ranks within each group, then `combine` the groups per key."""
    groups: dict[tuple, tuple[str, float]] = {}
    for sample in samples:
        key = key_of(sample)
        if key is None or math.isnan(sample.value):  # unknown tier; NaN = not computed
            continue
        value = sample.value
        group = (sample.name, tuple(sorted((k, v) for k, v in sample.labels.items()
                                           if k not in replicas)))
        previous = groups.get(group)
        if previous is None or value > previous[1]:
            groups[group] = (key, value)
    totals: dict[str, float] = {}
    for key, value in groups.values():
        if key not in totals:
            totals[key] = value
        elif combine == "max":
            totals[key] = max(totals[key], value)
        else:
            totals[key] += value
    return totals


def _histogram(samples: list[Sample], problems: list[str], name: str) -> HistogramValue | None:
    buckets = _aggregate([s for s in samples if s.name.endswith("_bucket")], "sum",
                         lambda s: s.labels.get("le"))
    sums = _aggregate([s for s in samples if s.name.endswith("_sum")], "sum", lambda s: "")
    if "+Inf" not in buckets or "" not in sums:
        problems.append(f"{name} has no +Inf bucket or no _sum: not used")
        return None
    try:
        ordered = sorted(buckets.items(), key=lambda item: float(item[0]))
    except ValueError:
        problems.append(f"{name} has a bucket bound that is not a number: not used")
        return None
    return HistogramValue(tuple(ordered), sums[""])

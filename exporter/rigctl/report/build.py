"""Building a report: the queries, bounded in number whatever the range (one per rule,
a few for the blind spans and ALERTS, about twenty for the tables, five for the HTML
page's timeline), and the model they fill.

Where the range has `ALERTS` series, the report's incidents are the union, bucket by
bucket, of the replay and of `ALERTS`: a moment counts as firing when either says so.
The replay sees history no rule evaluated (rules loaded later, a backfilled TSDB) and
`ALERTS` sees what the rules in force then saw (another threshold table, a rule since
changed); an incident one of them missed is the error a report read before trusting
the rig overnight must not make.
"""

from __future__ import annotations

import math
from collections import defaultdict

from exporter.rigctl.report.evaluate import Grid, counts, key, merged, spans
from exporter.rigctl.report.model import (
    VERDICT_OF_SEVERITY,
    Agent,
    Blind,
    Engine,
    Gpu,
    Incident,
    Report,
    Timeline,
)
from exporter.rigctl.report.query import Labels, Prometheus, Series
from exporter.rigctl.report.rules import INCIDENT_SEVERITIES, Rule

#: The labels of ALERTS that are the rule's, not the series'.
ALERT_OWN_LABELS = ("__name__", "alertname", "alertstate", "severity", "signal")
STARVATION = "RigDecodeStarvation"
TIERS = ("L1", "L2", "L3")
# The alerts whose seconds each card's table counts.
DOWNCLOCK, POWER_CAP = "RigGpuThermalDownclock", "RigGpuPowerCapped"
EXPORTER_SOURCE_DOWN = "RigExporterSourceDown"


def build(prometheus: Prometheus, start: float, end: float, rules: list[Rule],
          selection: list[str], eval_seconds: float, timeline: bool = False) -> Report:
    # Whole buckets, ending on an evaluation point (a multiple of the step, as
    # Prometheus aligns a subquery's points): the range ends up to a step earlier, and
    # starts up to a bucket earlier, than asked.
    end = math.floor(end / eval_seconds) * eval_seconds
    grid = Grid.of(start, end, eval_seconds)
    grid = Grid(end - grid.count * grid.step, end, eval_seconds, grid.step, grid.count)
    sel = "{" + ", ".join(selection) + "}"
    present = _present(prometheus, grid, sel)
    report = Report(grid.start, grid.end, grid.step, eval_seconds, "unknown", [], [], [], [],
                    [])
    if not any(present.values()):
        report.queries = prometheus.queries
        return report
    report.blind = _blind(prometheus, grid, sel, present)
    report.incidents = _incidents(prometheus, grid, sel, rules)
    window = f"{round(grid.end - grid.start)}s"
    report.agents = _agents(prometheus, grid.end, sel, window)
    report.gpus = _gpus(prometheus, grid, sel, window, rules)
    report.engines = _engines(prometheus, grid.end, sel, window)
    if timeline:
        report.timeline = _timeline(prometheus, grid, sel)
    report.verdict = verdict(report, rules)
    report.queries = prometheus.queries
    return report


def verdict(report: Report, rules: list[Rule]) -> str:
    """The worst incident's severity; with none, ok unless the exporter was blind for as
    long as RigExporterSourceDown holds: a blind span is never read as healthy."""
    worst = "ok"
    for incident in report.incidents:
        if VERDICT_OF_SEVERITY[incident.severity] == "crit":
            return "crit"
        worst = "warn"
    if worst == "ok":
        hold = max((r.for_seconds for r in rules if r.alert == EXPORTER_SOURCE_DOWN), default=0)
        blind = sum((b.end if b.end is not None else report.end) - b.start
                    for b in report.blind)
        if blind >= max(hold, report.eval_seconds):
            return "unknown"
    return worst


# --------------------------------------------------------------------- presence
def _present(prometheus: Prometheus, grid: Grid, sel: str) -> dict[str, dict[int, int]]:
    """Per exporter (job/instance), the evaluation points each bucket had it up: `up`
    where Prometheus wrote it, else any rig_source_up (a store fed without `up`)."""
    expr = (f"max by (job, instance) (up{sel} == 1) or (max by (job, instance) "
            f"(rig_source_up{sel}) unless on(job, instance) up{sel})")
    found = grid.range(prometheus, grid.counted(expr))
    return {s.labels.get("instance", ""): counts(grid, s) for s in found}


def _blind(prometheus: Prometheus, grid: Grid, sel: str,
           present: dict[str, dict[int, int]]) -> list[Blind]:
    full = grid.points_per_bucket
    out = []
    for instance, seen in present.items():
        missing = {k: full - seen.get(k, 0) for k in range(grid.count) if seen.get(k, 0) < full}
        source = "exporter" if len(present) == 1 else f"exporter {instance}"
        out += [Blind(source, s.start, s.end) for s in spans(grid, missing)]
    for series in grid.range(prometheus, grid.counted(f"rig_source_up{sel} == 0")):
        source = series.labels.get("source", "?")
        out += [Blind(source, s.start, s.end) for s in spans(grid, counts(grid, series))]
    return sorted(out, key=lambda b: (b.start, b.source))


# --------------------------------------------------------------------- incidents
def _incidents(prometheus: Prometheus, grid: Grid, sel: str, rules: list[Rule]) -> list[Incident]:
    firing: dict[tuple[Rule, tuple], dict[int, int]] = {}
    labels_of: dict[tuple, Labels] = {}
    for rule in rules:
        if rule.severity not in INCIDENT_SEVERITIES:
            continue
        for series in grid.range(prometheus, grid.counted(grid.firing(rule))):
            labels = _own(series.labels)
            labels_of[key(labels)] = labels
            firing[(rule, key(labels))] = counts(grid, series)
    by_name = {(r.alert, r.severity, r.signal): r for r in rules}
    alerts_sel = sel[:-1] + (", " if sel != "{}" else "") + 'alertstate="firing"}'
    # A point counts where ALERTS has a sample within the step, as the rules write it:
    # a store without staleness markers (a backfilled TSDB) holds no value past it.
    # (A millisecond short of the step: one sample in each window, whatever its phase.)
    window = f"{round(grid.eval_seconds * 1000) - 1}ms"
    alerts = grid.counted(f"last_over_time(ALERTS{alerts_sel}[{window}])")
    for series in grid.range(prometheus, alerts):
        la = series.labels
        rule = by_name.get((la.get("alertname", ""), la.get("severity", ""),
                            la.get("signal", "")))
        if rule is None or rule.severity not in INCIDENT_SEVERITIES:
            continue
        labels = _own(la)
        labels_of[key(labels)] = labels
        firing[(rule, key(labels))] = merged(firing.get((rule, key(labels)), {}),
                                             counts(grid, series))
    incidents = []
    for (rule, k), per_bucket in firing.items():
        labels = dict(labels_of[k])
        if rule.signal:
            labels["signal"] = rule.signal
        for span in spans(grid, per_bucket):
            incidents.append((rule, k, span, Incident(
                rule.alert, rule.severity, labels, span.start, span.end, span.seconds,
                rule.summary)))
    if any(r.alert == STARVATION for r, *_ in incidents):
        _starvation(prometheus, grid, sel, incidents)
    return sorted((i for *_, i in incidents), key=lambda i: (i.start, i.alert))


def _own(labels: Labels) -> Labels:
    return {k: v for k, v in labels.items() if k not in ALERT_OWN_LABELS}


def _starvation(prometheus: Prometheus, grid: Grid, sel: str, incidents: list) -> None:
    """Each starvation's longest stall (the rule's own value), and from the tap the
    agent stalled most and the one blamed most over its buckets."""
    stalls: dict[tuple, dict[int, float]] = {}
    for rule in {r for r, *_ in incidents if r.alert == STARVATION}:
        for series in grid.range(prometheus, grid.over("max_over_time", rule.expr)):
            stalls[(rule, key(_own(series.labels)))] = _values(grid, series)
    starved = grid.range(prometheus, f"sum by (job, instance, engine, agent, by) (increase("
                         f"rig_agent_starved_seconds_total{sel}[{round(grid.step)}s]))")
    for rule, k, span, incident in incidents:
        if rule.alert != STARVATION:
            continue
        buckets = range(span.first, span.last + 1)
        values = stalls.get((rule, k), {})
        incident.stall_seconds = max((values[b] for b in buckets if b in values), default=None)
        where = dict(k)
        per_agent: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for series in starved:
            if any(series.labels.get(label) != where.get(label)
                   for label in ("job", "instance", "engine") if label in where):
                continue
            # The stall is counted when the gap is seen: a bucket past the span too.
            seconds = sum(v for b, v in _values(grid, series).items()
                          if span.first <= b <= span.last + 1)
            per_agent[series.labels.get("agent", "?")][series.labels.get("by", "none")] += seconds
        stalled = {a: sum(by.values()) for a, by in per_agent.items()}
        if stalled and max(stalled.values()) > 0:
            incident.agent = max(stalled, key=lambda a: stalled[a])
            blamed = per_agent[incident.agent]
            named = {b: s for b, s in blamed.items() if b != "none" and s > 0}
            incident.by = max(named, key=lambda b: named[b]) if named else "none"


def _values(grid: Grid, series: Series) -> dict[int, float]:
    return {grid.index(t): v for t, v in series.points if 0 <= grid.index(t) < grid.count}


# --------------------------------------------------------------------- tables
def _by(series: list[Series], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.get(label, "") for label in labels): s.points[-1][1]
            for s in series if s.points}


def _count(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _agents(prometheus: Prometheus, at: float, sel: str, window: str) -> list[Agent]:
    def increase(family: str) -> dict[tuple[str, ...], float]:
        return _by(prometheus.instant(
            f"sum by (engine, agent) (increase({family}{sel}[{window}]))", at), "engine", "agent")

    def highest(family: str) -> dict[tuple[str, ...], float]:
        return _by(prometheus.instant(
            f"max by (engine, agent) (max_over_time({family}{sel}[{window}]))", at),
            "engine", "agent")

    requests = increase("rig_agent_requests_total")
    prompt = increase("rig_agent_prompt_tokens_total")
    cached = increase("rig_agent_cached_prompt_tokens_total")
    generated = increase("rig_agent_generated_tokens_total")
    unbounded = increase("rig_agent_unbounded_requests_total")
    gap = highest("rig_agent_max_token_gap_seconds")
    context = highest("rig_agent_last_prompt_tokens")
    starved = _by(prometheus.instant(
        f"sum by (engine, agent, by) (increase(rig_agent_starved_seconds_total{sel}[{window}]))",
        at), "engine", "agent", "by")
    names = sorted({*requests, *prompt, *generated, *gap, *(k[:2] for k in starved)})
    out = []
    for name in names:
        by = {k[2]: round(v, 3) for k, v in starved.items() if k[:2] == name and v > 0}
        out.append(Agent(
            engine=name[0], agent=name[1], requests=_count(requests.get(name, 0.0)),
            prompt_tokens=_count(prompt.get(name, 0.0)),
            cached_prompt_tokens=_count(cached.get(name)),
            generated_tokens=_count(generated.get(name, 0.0)),
            unbounded_requests=_count(unbounded.get(name, 0.0)),
            max_token_gap_seconds=gap.get(name), max_context_tokens=_count(context.get(name)),
            starved_seconds=round(sum(by.values()), 3), starved_by=by))
    return out


def _held_seconds(prometheus: Prometheus, grid: Grid, rule: Rule | None,
                  window: str) -> dict[str, float]:
    """Per card, the seconds `rule`'s condition held over the range, before its `for`."""
    if rule is None:
        return {}
    expr = (f"max by (card) (count_over_time(({rule.expr})[{window}:"
            f"{round(grid.eval_seconds * 1000)}ms])) * {grid.eval_seconds:g}")
    return {k[0]: v for k, v in _by(prometheus.instant(expr, grid.end), "card").items()}


def _gpus(prometheus: Prometheus, grid: Grid, sel: str, window: str,
          rules: list[Rule]) -> list[Gpu]:
    def first(name: str) -> Rule | None:
        # The mildest rule of an alert holds the condition longest (the shortest `for`).
        found = sorted((r for r in rules if r.alert == name), key=lambda r: r.for_seconds)
        return found[0] if found else None

    junction = _by(prometheus.instant(f"max by (card) (max_over_time(rig_gpu_temperature_celsius"
                                      f"{sel[:-1]}{', ' if sel != '{}' else ''}"
                                      f'sensor="junction"}}[{window}]))', grid.end), "card")
    cards = _by(prometheus.instant(f"max by (card) (max_over_time(rig_gpu_present{sel}[{window}]))",
                                   grid.end), "card")
    down = _held_seconds(prometheus, grid, first(DOWNCLOCK), window)
    capped = _held_seconds(prometheus, grid, first(POWER_CAP), window)
    names = sorted({k[0] for k in (*junction, *cards)} | set(down) | set(capped))
    return [Gpu(card, junction.get((card,)), down.get(card, 0.0), capped.get(card, 0.0))
            for card in names]


def _engines(prometheus: Prometheus, at: float, sel: str, window: str) -> list[Engine]:
    def q(expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        return _by(prometheus.instant(expr, at), *labels)

    # The longest stall either the stall tracker or the stream tap saw.
    stall: dict[tuple[str, ...], float] = {}
    for family in ("rig_engine_decode_stall_max_seconds", "rig_stream_max_token_gap_seconds"):
        for name, value in q(f"max by (engine, kind) (max_over_time({family}{sel}[{window}]))",
                             "engine", "kind").items():
            stall[name] = max(value, stall.get(name, value))
    prompt = q(f"sum by (engine, kind) (increase(rig_engine_prompt_tokens_total{sel}[{window}]))",
               "engine", "kind")
    generated = q(f"sum by (engine, kind) (increase(rig_engine_generation_tokens_total{sel}"
                  f"[{window}]))", "engine", "kind")
    hits = q(f"sum by (engine, kind, tier) (increase(rig_engine_cache_hit_tokens_total{sel}"
             f"[{window}]))", "engine", "kind", "tier")
    names = sorted({*stall, *prompt, *generated, *(k[:2] for k in hits)})
    out = []
    for name in names:
        tiers = {k[2]: v for k, v in hits.items() if k[:2] == name}
        # SGLang makes a tier's counter on its first hit: with the family there, an
        # absent tier served nothing; with none at all, the engine does not say.
        cache = {t: _count(tiers.get(t, 0.0)) if tiers else None for t in TIERS}
        out.append(Engine(name[0], name[1], stall.get(name), _count(prompt.get(name)),
                          _count(generated.get(name)), cache))
    return out


# --------------------------------------------------------------------- timeline
def _timeline(prometheus: Prometheus, grid: Grid, sel: str) -> Timeline:
    step = f"{round(grid.step)}s"

    def curves(expr: str, *labels: str) -> dict[str, list[tuple[float, float]]]:
        return {"/".join(s.labels.get(label, "") for label in labels): s.points
                for s in grid.range(prometheus, expr)}

    inner = sel[:-1] + (", " if sel != "{}" else "")
    return Timeline(
        junction=curves(f'max by (card) (max_over_time(rig_gpu_temperature_celsius{inner}'
                        f'sensor="junction"}}[{step}]))', "card"),
        sclk=curves(f'max by (card) (min_over_time(rig_gpu_clock_hertz{inner}clock="sclk"}}'
                    f'[{step}]))', "card"),
        kv=curves(f"max by (engine) (max_over_time(rig_engine_kv_usage_ratio{sel}[{step}]))",
                  "engine"),
        l2=curves(f"max by (engine) (max_over_time(rig_engine_hicache_host_used_tokens{sel}"
                  f"[{step}]) / max_over_time(rig_engine_hicache_host_capacity_tokens{sel}"
                  f"[{step}]))", "engine"),
        stall=curves(f"max by (engine) (max_over_time(rig_engine_decode_stall_max_seconds{sel}"
                     f"[{step}]))", "engine"))

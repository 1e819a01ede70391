"""A small offline PromQL analyser for rule lint (pint's offline checks, emulated).

It parses just enough PromQL to tell which labels an expression's result keeps
(aggregations, `on`/`ignoring`, `label_replace`), which labels its selectors, groupings
and matchings name, and which functions take which range vectors. The labels of each
family are those of the golden expositions (tests/golden/, rigdev/golden.py), the
exporter's own output, so a rule or a panel that names a label its family does not
have fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporter.schema import ENGINE_LABELS
from rigdev import golden

TARGET = {"job", "instance"}  # added by Prometheus to every series
ENGINE = set(ENGINE_LABELS)
CARD = {"card"}
AGENT = ENGINE | {"agent"}


def golden_families() -> dict[str, tuple[str, set[str]]]:
    """family -> (type, label names), read from the golden expositions (rigdev/golden.py):
    what the exporter really exports in front of each engine kind."""
    found: dict[str, tuple[str, set[str]]] = {}
    for kind in golden.KINDS:
        for family in text_string_to_metric_families(golden.path_for(kind).read_text()):
            labels = {name for s in family.samples for name in s.labels} - {"le"}
            _, known = found.setdefault(family.name, (family.type, set()))
            known |= labels
    return found


# Families the exporter has that no golden shows, because no committed fixture holds what
# they read; each says why. tests/alerts/test_rules_lint.py fails once a golden shows one.
NOT_IN_THE_GOLDENS: dict[str, tuple[str, set[str], str]] = {
    "rig_engine_spec_accept_length": ("gauge", ENGINE, "no capture decodes speculatively"),
    "rig_engine_spec_accept_ratio": ("gauge", ENGINE, "no capture decodes speculatively"),
    "rig_engine_spec_draft_tokens_total": ("counter", ENGINE, "no capture decodes speculatively"),
    "rig_engine_spec_accepted_tokens_total": ("counter", ENGINE,
                                              "no capture decodes speculatively"),
    "rig_engine_spec_verify_steps_total": ("counter", ENGINE, "no capture decodes speculatively"),
    "rig_gpu_energy_joules_total": ("counter", CARD,
                                    "the sysfs tree's gpu_metrics leaves the accumulator empty"),
    "rig_host_cpu_temperature_celsius": ("gauge", {"sensor"},
                                         "the sysfs tree has no CPU hwmon (k10temp)"),
    "rig_agent_last_prompt_tokens": ("gauge", AGENT, "no request goes through the tap"),
    "rig_agent_cached_prompt_tokens_total": ("counter", AGENT, "no request goes through the tap"),
}


def _schema() -> dict[str, tuple[str, set[str]]]:
    found = golden_families()
    for name, (kind, labels, _) in NOT_IN_THE_GOLDENS.items():
        # prometheus_client names a counter's family without `_total`.
        found.setdefault(name.removesuffix("_total") if kind == "counter" else name,
                         (kind, set(labels)))
    return found


SCHEMA = _schema()
COUNTERS: dict[str, set[str]] = {f"{name}_total": labels for name, (kind, labels)
                                 in SCHEMA.items() if kind == "counter"}
GAUGES: dict[str, set[str]] = {name: labels for name, (kind, labels) in SCHEMA.items()
                               if kind in ("gauge", "info", "unknown")}
HISTOGRAMS: dict[str, set[str]] = {name: labels for name, (kind, labels) in SCHEMA.items()
                                   if kind == "histogram"}
# Recording-rule levels (alerts/rules/common.py docstring) -> labels kept.
LEVELS: dict[str, set[str]] = {
    "engine": ENGINE,
    "engine_tier": ENGINE | {"tier"},
    "card": CARD | {"clock"},
    "card_sensor": CARD | {"sensor"},
    "instance": set(),
}
AGGREGATIONS = {
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "group",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
}
COUNTER_FUNCTIONS = {"rate", "increase", "irate", "resets"}
PRECEDENCE = {
    "or": 1,
    "and": 2,
    "unless": 2,
    "==": 3,
    "!=": 3,
    "<=": 3,
    "<": 3,
    ">=": 3,
    ">": 3,
    "+": 4,
    "-": 4,
    "*": 5,
    "/": 5,
    "%": 5,
    "atan2": 5,
    "^": 6,
}
# deploy/prometheus.yml gives every target a `rig` label; `__name__` is every series'.
NAMEABLE = {"rig", "__name__"}
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
DURATION = re.compile(r"(\d+)([smhdw])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
    |(?P<brace>\{[^}]*\})|(?P<range>\[[^\]]*\])
    |(?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    |(?P<op>==|!=|>=|<=|[-+*/%^<>(),])
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*))""",
    re.X,
)


def seconds(duration: str) -> int:
    return sum(int(n) * UNIT_SECONDS[u] for n, u in DURATION.findall(duration))


def schema_labels(metric: str) -> set[str] | None:
    for family in (GAUGES, COUNTERS):
        if metric in family:
            return family[metric] | TARGET
    for base, labels in HISTOGRAMS.items():
        if metric in (f"{base}_bucket", f"{base}_sum", f"{base}_count"):
            return labels | TARGET | ({"le"} if metric.endswith("_bucket") else set())
    if metric.count(":") == 2 and metric.split(":")[0] in LEVELS:
        return LEVELS[metric.split(":")[0]] | TARGET
    return None


@dataclass
class Analysis:
    """What one expression does: selectors, range functions and comparisons."""

    metrics: set[str] = field(default_factory=set)
    ranges: list[tuple[str, str, str]] = field(default_factory=list)  # (function, arg, range)
    comparisons: int = 0
    #: Labels named (in a matcher, a grouping, a matching) that the series lacks.
    unknown_labels: list[str] = field(default_factory=list)


def _combine(
    op: str,
    lhs: set[str] | None,
    rhs: set[str] | None,
    on: set[str] | None,
    ignoring: set[str] | None,
    group: str | None,
    extra: set[str],
) -> set[str] | None:
    """Labels of `lhs op rhs` (one-to-one matching keeps only the `on` labels)."""
    if lhs is None or rhs is None:
        return rhs if lhs is None else lhs
    if op == "or":
        return lhs | rhs
    if op in ("and", "unless"):
        return lhs
    if group == "group_left":
        return lhs | extra
    if group == "group_right":
        return rhs | extra
    if on is not None:
        return set(on)
    return lhs - (ignoring or set())


class _Parser:
    def __init__(self, expr: str) -> None:
        self.tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in TOKEN.finditer(expr)]
        self.pos = 0
        self.result = Analysis()

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        kind, text = self.tokens[self.pos]
        if expected is not None and text != expected:
            raise ValueError(f"expected {expected!r}, got {text!r}")
        self.pos += 1
        return text

    def check(self, what: str, labels: set[str] | None, named: Iterable[str]) -> None:
        """Note each label of `named` that `labels` (a series' or a result's) lacks."""
        if labels is None or "<unknown>" in labels:
            return
        self.result.unknown_labels += [f"{what} has no label {name!r}" for name in named
                                       if name not in labels | NAMEABLE]

    def label_list(self) -> set[str]:
        self.take("(")
        labels = set()
        while self.peek() != ")":
            token = self.take()
            if token != ",":
                labels.add(token)
        self.take(")")
        return labels

    def expr(self, min_prec: int = 1) -> set[str] | None:
        """Labels of the result; None for a scalar."""
        lhs = self.unary()
        while (op := self.peek()) in PRECEDENCE and PRECEDENCE[op] >= min_prec:
            self.take()
            if PRECEDENCE[op] == 3:
                self.result.comparisons += 1
            if self.peek() == "bool":
                self.take()
            on: set[str] | None = None
            ignoring: set[str] | None = None
            group: str | None = None
            extra: set[str] = set()
            if self.peek() in ("on", "ignoring"):
                modifier = self.take()
                labels = self.label_list()
                on, ignoring = (labels, None) if modifier == "on" else (None, labels)
            if self.peek() in ("group_left", "group_right"):
                group = self.take()
                extra = self.label_list() if self.peek() == "(" else set()
            rhs = self.expr(PRECEDENCE[op] + 1)
            if lhs is not None and rhs is not None:
                for side, labels in (("left", lhs), ("right", rhs)):
                    self.check(f"the {side} side of {op} on()", labels, sorted(on or ()))
                self.check(f"the {'right' if group == 'group_left' else 'left'} side of {op}",
                           rhs if group == "group_left" else lhs, sorted(extra))
            lhs = _combine(op, lhs, rhs, on, ignoring, group, extra)
        return lhs

    def unary(self) -> set[str] | None:
        if self.peek() in ("-", "+"):
            self.take()
        return self.primary()

    def primary(self) -> set[str] | None:
        kind, text = self.tokens[self.pos]
        self.pos += 1
        if text == "(":
            labels = self.expr()
            self.take(")")
            self.subquery()
            return labels
        if kind == "num":
            return None
        if kind == "ident" and text in AGGREGATIONS:
            return self.aggregation()
        if kind == "ident" and self.peek() == "(":
            return self.call(text)
        if kind == "ident":
            self.result.metrics.add(text)
            labels = schema_labels(text)
            if self.peek() and self.peek().startswith("{"):
                self.check(text, labels, MATCHER.findall(self.take()))
            self.subquery()
            return labels if labels is not None else {"<unknown>"}
        raise ValueError(f"unexpected token {text!r}")

    def subquery(self) -> str | None:
        window = self.take() if self.peek() and self.peek().startswith("[") else None
        if self.peek() == "offset":  # `offset 5m` lexes as offset, 5, m
            self.take()
            while self.pos + 1 < len(self.tokens) and self.tokens[self.pos][0] == "num":
                self.take()
                self.take()
        return window

    def aggregation(self) -> set[str] | None:
        grouping = None
        if self.peek() in ("by", "without"):
            grouping = (self.take(), self.label_list())
        self.take("(")
        labels = self.expr()
        while self.peek() == ",":  # topk(k, v): the vector is last
            self.take()
            labels = self.expr()
        self.take(")")
        if self.peek() in ("by", "without"):
            grouping = (self.take(), self.label_list())
        if grouping is None:
            return set()
        kind, names = grouping
        self.check(f"the operand of {kind}", labels, sorted(names))
        return set(names) if kind == "by" else (labels or set()) - names

    def call(self, function: str) -> set[str] | None:
        self.take("(")
        args: list[tuple[set[str] | None, int, int]] = []
        while self.peek() != ")":
            start = self.pos
            if self.tokens[self.pos][0] == "str":
                self.take()
                args.append((None, start, self.pos))
            else:
                args.append((self.expr(), start, self.pos))
            if self.peek() == ",":
                self.take()
        self.take(")")
        if args and self.tokens[args[0][2] - 1][1].startswith("["):
            first = " ".join(t for _, t in self.tokens[args[0][1] : args[0][2] - 1])
            self.result.ranges.append((function, first, self.tokens[args[0][2] - 1][1]))
        if function in ("time", "scalar"):
            return None
        if function == "vector":
            return set()
        labels = args[0][0] if args else set()
        if function == "label_replace" and labels is not None:
            destination = self.tokens[args[1][1]][1].strip("\"'")
            return labels | {destination}
        return labels


def analyse(expr: str) -> tuple[set[str] | None, Analysis]:
    parser = _Parser(expr)
    labels = parser.expr()
    if parser.pos != len(parser.tokens):
        raise ValueError(f"trailing tokens in {expr!r}: {parser.tokens[parser.pos :]}")
    return labels, parser.result

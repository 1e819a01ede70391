"""A small offline PromQL analyser for rule lint (pint's offline checks, emulated).

It parses just enough PromQL to tell which labels an expression's result keeps
(aggregations, `on`/`ignoring`, `label_replace`) and which functions take which
range vectors. The rig's metric schema (docs/metrics.md) supplies the labels of each
selector.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TARGET = {"job", "instance"}  # added by Prometheus to every series
ENGINE = {"engine", "kind"}
CARD = {"card"}
AGENT = ENGINE | {"agent"}

GAUGES: dict[str, set[str]] = {
    "rig_source_up": {"source"},
    "rig_source_scrape_duration_seconds": {"source"},
    "rig_build_info": {"version"},
    "rig_engine_info": ENGINE
    | {
        "version",
        "model",
        "tp_size",
        "hicache",
        "hicache_storage",
        "mixed_chunk",
        "chunked_prefill_size",
        "schedule_policy",
        "speculative",
        "decode_log_interval",
    },
    "rig_engine_running_requests": ENGINE,
    "rig_engine_queued_requests": ENGINE,
    "rig_engine_kv_usage_ratio": ENGINE,
    "rig_engine_spec_accept_length": ENGINE,
    "rig_engine_spec_accept_ratio": ENGINE,
    "rig_engine_kv_capacity_tokens": ENGINE,
    "rig_engine_hicache_host_used_tokens": ENGINE,
    "rig_engine_hicache_host_capacity_tokens": ENGINE,
    "rig_engine_decode_stall_seconds": ENGINE,
    "rig_engine_decode_stall_max_seconds": ENGINE,
    "rig_engine_decode_stall_upper_seconds": ENGINE,
    "rig_engine_decode_stall_max_upper_seconds": ENGINE,
    "rig_engine_decode_stall_plan_info": ENGINE | {"plan", "progress", "in_flight"},
    "rig_probe_success": ENGINE,
    "rig_probe_ttft_seconds": ENGINE,
    "rig_probe_max_token_gap_seconds": ENGINE,
    "rig_probe_decode_tokens_per_second": ENGINE,
    "rig_stream_max_token_gap_seconds": ENGINE,
    "rig_stream_active": ENGINE,
    "rig_engine_context_length_tokens": ENGINE,
    "rig_engine_max_sequence_tokens": ENGINE,
    "rig_engine_slot_context_tokens": ENGINE | {"slot"},
    "rig_engine_slot_request_tokens": ENGINE | {"slot"},
    "rig_engine_slot_processing": ENGINE | {"slot"},
    "rig_agent_streams_active": AGENT,
    "rig_agent_last_prompt_tokens": AGENT,
    "rig_agent_max_token_gap_seconds": AGENT,
    "rig_agent_longest_request_seconds": AGENT,
    "rig_agent_longest_first_token_wait_seconds": AGENT,
    "rig_agent_response_tokens_max": AGENT,
    "rig_agent_unbounded_response_tokens_max": AGENT,
    "rig_gpu_present": CARD | {"pci_bus", "unique_id"},
    "rig_gpu_info": CARD | {"pci_bus", "device_id", "kind"},
    "rig_gpu_expected_cards": set(),
    "rig_gpu_temperature_celsius": CARD | {"sensor"},
    "rig_gpu_temperature_limit_celsius": CARD | {"sensor", "limit"},
    "rig_gpu_power_watts": CARD,
    "rig_gpu_power_cap_watts": CARD,
    "rig_gpu_power_cap_max_watts": CARD,
    "rig_gpu_clock_hertz": CARD | {"clock"},
    "rig_gpu_clock_max_hertz": CARD | {"clock"},
    "rig_gpu_busy_ratio": CARD,
    "rig_gpu_memory_busy_ratio": CARD,
    "rig_gpu_vram_used_bytes": CARD,
    "rig_gpu_vram_total_bytes": CARD,
    "rig_gpu_fan_rpm": CARD,
    "rig_gpu_pcie_link_speed_transfers_per_second": CARD | {"port", "kind"},
    "rig_gpu_pcie_link_width_lanes": CARD | {"port", "kind"},
    "rig_gpu_throttle_active": CARD | {"reason"},
    "rig_host_memory_total_bytes": set(),
    "rig_host_memory_available_bytes": set(),
    "rig_host_swap_total_bytes": set(),
    "rig_host_swap_used_bytes": set(),
    "rig_host_cpu_temperature_celsius": {"sensor"},
}
COUNTERS: dict[str, set[str]] = {
    "rig_engine_prompt_tokens_total": ENGINE,
    "rig_engine_generation_tokens_total": ENGINE,
    "rig_engine_cache_hit_tokens_total": ENGINE | {"tier"},
    "rig_engine_hicache_evicted_tokens_total": ENGINE,
    "rig_engine_hicache_loaded_back_tokens_total": ENGINE,
    "rig_engine_hicache_backed_up_tokens_total": ENGINE,
    "rig_engine_hicache_storage_prefetched_tokens_total": ENGINE,
    "rig_engine_hicache_storage_written_tokens_total": ENGINE,
    "rig_engine_retracted_requests_total": ENGINE,
    "rig_engine_decode_batches_total": ENGINE,
    "rig_engine_decode_calls_total": ENGINE,
    "rig_engine_spec_draft_tokens_total": ENGINE,
    "rig_engine_spec_accepted_tokens_total": ENGINE,
    "rig_engine_spec_verify_steps_total": ENGINE,
    "rig_engine_decode_stalled_seconds_total": ENGINE,
    "rig_stream_requests_total": ENGINE | {"outcome"},
    "rig_stream_generated_tokens_total": ENGINE,
    "rig_stream_frames_total": ENGINE,
    "rig_agent_requests_total": AGENT | {"outcome"},
    "rig_agent_prompt_tokens_total": AGENT,
    "rig_agent_cached_prompt_tokens_total": AGENT,
    "rig_agent_generated_tokens_total": AGENT,
    "rig_agent_unbounded_requests_total": AGENT,
    "rig_agent_starved_seconds_total": AGENT | {"by"},
    "rig_gpu_energy_joules_total": CARD,
    "rig_host_swap_in_bytes_total": set(),
    "rig_host_swap_out_bytes_total": set(),
    "rig_host_memory_pressure_stall_seconds_total": {"kind"},
}
HISTOGRAMS: dict[str, set[str]] = {
    "rig_engine_time_to_first_token_seconds": ENGINE,
    "rig_engine_inter_token_latency_seconds": ENGINE,
    "rig_probe_token_gap_seconds": ENGINE,
    "rig_stream_ttft_seconds": ENGINE,
    "rig_stream_token_gap_seconds": ENGINE,
    "rig_agent_ttft_seconds": AGENT,
}
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
            if self.peek() and self.peek().startswith("{"):
                self.take()
            self.subquery()
            labels = schema_labels(text)
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

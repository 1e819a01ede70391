"""Rig: agents: who waits, who starves whom, who holds the engine, whose context no
longer fits (docs/dashboards.md, docs/tap.md#agents).

Every series is the stream tap's per-agent accounting (`rig_agent_*`): present only
for an engine with a tap, one series per configured agent plus `other`. Each gauge of
a maximum (a gap, an age, a response's size) is drawn as its highest value over each
point's own interval (`max_over_time(...[$__interval])`), as on the overview and
decode dashboards: a gauge drawn point-wise loses a peak that falls between points.
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.panels import (
    UIDS,
    Section,
    over_interval,
    rate,
    rig_dashboard,
    sel,
    steps,
    targets,
    threshold_override,
    timeseries,
)
from exporter.thresholds import Thresholds

AGENT = "{{engine}} {{agent}}"
POOL = "pool"


def peak(metric: str) -> str:
    """A gauge of a maximum, as the highest it read within each point's interval: a
    gap, a wait or a response that peaks between two points still reaches one."""
    return over_interval("max", sel(metric))


def _pool_line() -> dict:
    """The pool's capacity drawn as a limit over the stacked contexts, not stacked."""
    override = threshold_override(f".*{POOL}.*")
    override["properties"].append({"id": "custom.stacking",
                                   "value": {"mode": "none", "group": "A"}})
    return override


def build(t: Thresholds) -> Dashboard:
    context = Section("Context per agent", [
        timeseries(
            "Agents' contexts against the KV pool",
            "The prompt each agent last sent, as the engine counted it (its context),"
            " stacked: the agents' working set. Dashed: the KV pool, L1 plus the L2 host"
            " pool where HiCache is on. Above it, returning sessions are evicted and"
            " prefilled again.",
            "short",
            targets(
                (sel("rig_agent_last_prompt_tokens"), AGENT),
                (f"sum by (engine) ({sel('rig_engine_kv_capacity_tokens')})"
                 f" + (sum by (engine) ({sel('rig_engine_hicache_host_capacity_tokens')})"
                 f" or sum by (engine) ({sel('rig_engine_kv_capacity_tokens')}) * 0)",
                 f"{{{{engine}}}} {POOL}"),
            ),
            stack=True, overrides=[_pool_line()],
            alerts=("RigAgentsWorkingSetOverPool",), axis_label="tokens", w=16,
        ),
        timeseries(
            "Context against the context length",
            "Each agent's last prompt over the engine's context length. Dashed line:"
            f" {t.agent_context_ratio:.0%}; at 100 % the next turn no longer fits.",
            "percentunit",
            targets((f"{sel('rig_agent_last_prompt_tokens')} / ignoring(agent) group_left"
                     f" {sel('rig_engine_context_length_tokens')}", AGENT)),
            thresholds=steps(("red", t.agent_context_ratio)),
            alerts=("RigAgentContextNearLimit",), min_value=0, max_value=1, w=8,
        ),
    ])
    waiting = Section("Waiting and gaps", [
        timeseries(
            "Time to first token per agent",
            "The median and 95th percentile time to first token of each agent's streams"
            " over the interval, as the tap timed them.",
            "s",
            targets(
                ("histogram_quantile(0.5, sum by (engine, agent, le) ("
                 f"{rate('rig_agent_ttft_seconds_bucket')}))", f"{AGENT} p50"),
                ("histogram_quantile(0.95, sum by (engine, agent, le) ("
                 f"{rate('rig_agent_ttft_seconds_bucket')}))", f"{AGENT} p95"),
            ),
            w=8,
        ),
        timeseries(
            "Longest token gap per agent",
            "The longest wait between two tokens of each agent's streams in the last"
            " minute, a gap still open included. Dashed lines: the stutter"
            f" ({t.decode_stutter_seconds:g} s) and starvation"
            f" ({t.decode_stall_critical_seconds:g} s) levels.",
            "s",
            targets((peak("rig_agent_max_token_gap_seconds"), AGENT)),
            thresholds=steps(("orange", t.decode_stutter_seconds),
                             ("red", t.decode_stall_critical_seconds)),
            alerts=("RigDecodeStarvation",), w=8,
        ),
        timeseries(
            "Requests in flight and their age",
            "Each agent's oldest streaming request in flight, and its oldest still"
            " waiting for a first token. Dashed lines: the"
            f" {t.agent_hog_waiting_seconds // 60} min wait and the"
            f" {t.agent_hog_running_seconds // 60} min run of one agent holding the engine.",
            "s",
            targets(
                (peak("rig_agent_longest_request_seconds"), f"{AGENT} running"),
                (peak("rig_agent_longest_first_token_wait_seconds"),
                 f"{AGENT} waiting for a first token"),
            ),
            thresholds=steps(("orange", t.agent_hog_waiting_seconds),
                             ("red", t.agent_hog_running_seconds)),
            alerts=("RigAgentHoggingEngine",), w=8,
        ),
        timeseries(
            "Streams in flight per agent",
            "Each agent's streamed responses in flight now.",
            "short",
            targets((sel("rig_agent_streams_active"), AGENT)),
            stack=True, w=8,
        ),
    ])
    tokens = Section("Tokens per agent", [
        timeseries(
            "Tokens/s per agent",
            "Prompt tokens each agent sent, those the engine served from its cache, and"
            " tokens generated for it, per second.",
            "short",
            targets(
                (rate("rig_agent_prompt_tokens_total"), f"{AGENT} prompt"),
                (rate("rig_agent_cached_prompt_tokens_total"), f"{AGENT} cached"),
                (rate("rig_agent_generated_tokens_total"), f"{AGENT} generated"),
            ),
            axis_label="tokens/s", w=8,
        ),
        timeseries(
            "Uncached share of prompt tokens",
            "The share of each agent's prompt tokens the engine had to compute (no cache"
            " held them) over the interval. Dashed line:"
            f" {t.agent_recompute_uncached_ratio:.0%}; held over large prompts it is thrash.",
            "percentunit",
            targets((f"1 - {rate('rig_agent_cached_prompt_tokens_total', fn='increase')}"
                     f" / {rate('rig_agent_prompt_tokens_total', fn='increase')}", AGENT)),
            thresholds=steps(("orange", t.agent_recompute_uncached_ratio)),
            alerts=("RigAgentRecomputing",), min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "Largest response in flight",
            "The largest response each agent has in flight, in generated tokens, and the"
            " same over its requests sent with no token limit. Dashed lines: an unbounded"
            f" response past {t.agent_runaway_tokens // 4:,}, any past"
            f" {t.agent_runaway_tokens:,}.",
            "short",
            targets(
                (peak("rig_agent_response_tokens_max"), f"{AGENT} any"),
                (peak("rig_agent_unbounded_response_tokens_max"), f"{AGENT} unbounded"),
            ),
            thresholds=steps(("orange", t.agent_runaway_tokens // 4),
                             ("red", t.agent_runaway_tokens)),
            alerts=("RigAgentRunawayOutput",), axis_label="tokens", w=8,
        ),
    ])
    starved = Section("Who starved whom", [
        timeseries(
            "Starved seconds per second, by whom",
            "How much of each second an agent's streams stood still (gaps of 1 s or"
            " more) while agent `by` waited for its first token (its prefill, the usual"
            " cause); `none`: nobody waited. One series per pair: the starved-by matrix"
            " over time.",
            "percentunit",
            targets((rate("rig_agent_starved_seconds_total"),
                     "{{engine}} {{agent}} by {{by}}")),
            alerts=("RigDecodeStarvation",), stack=True, bars=True, w=16,
        ),
        timeseries(
            "Requests per agent by outcome",
            "Each agent's streaming requests that ended, per interval, by outcome (ok,"
            " error, client_closed, untimed); and requests sent with no token limit.",
            "short",
            targets(
                (rate("rig_agent_requests_total", fn="increase"),
                 "{{engine}} {{agent}} {{outcome}}"),
                (rate("rig_agent_unbounded_requests_total", fn="increase"),
                 f"{AGENT} unbounded"),
            ),
            bars=True, w=8,
        ),
    ])
    return rig_dashboard(
        "Rig: agents",
        UIDS["agents"],
        "Per agent, as the stream tap names them: contexts stacked against the KV pool;"
        " time to first token and the longest gap; requests in flight and their age;"
        " tokens; who starved whom.",
        [context, waiting, tokens, starved],
    )


dashboard = build(Thresholds())

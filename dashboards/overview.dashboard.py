"""Rig overview: a tile per failure the rig has had, then the owner's questions and the
rig at a glance (docs/dashboards.md#the-overview).

Each tile turns orange (warning) or red (critical) on its rule's own condition and
threshold (exporter/thresholds.py, or the rule's expression itself where it has
several conditions, dashboards/rules.py), so it changes colour as soon as the
condition holds, before the alert's `for` has passed. It shows the worst value of
each engine or card over the dashboard's time range, every point being the worst
of its own interval (`max_over_time(...[$__interval])`), so a 47 s stall an hour
ago still shows. A series that does not exist yet (a counter before its first
event) reads 0; a tile with no engine or card at all says so.
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from alerts.rules.common import (
    ANY_HIT_SHARE,
    HEADROOM,
    HIT_SHARE,
    HOST_USAGE,
    MEM_AVAILABLE,
    SWAP_IO,
    dur,
)
from dashboards.panels import (
    ALERT_LABELS,
    ALERT_STATE_COLORS,
    UIDS,
    Section,
    falling_steps,
    just_above,
    or_zero,
    over_interval,
    over_range,
    rate,
    rig_dashboard,
    scoped,
    sel,
    stat,
    state_timeline,
    steps,
    target,
    targets,
    timeseries,
)
from dashboards.rules import rule_expr
from exporter.schema import (
    CARD_LABEL,
    ENGINE_LABEL,
    ENGINE_SERIES,
    ENGINE_SOURCES,
    HOT_SENSORS_MATCHER,
    OTHER_SOURCES,
    RIG_LABEL,
    label_list,
)
from exporter.thresholds import Thresholds

# One engine, or one card, of each rig: what a tile shows a value for.
BY_RIG_ENGINE = label_list(RIG_LABEL, ENGINE_LABEL)
BY_RIG_CARD = label_list(RIG_LABEL, CARD_LABEL)
DECODE = ("Decode and latency", UIDS["decode"])
HICACHE = ("KV and HiCache", UIDS["hicache"])
GPUS = ("GPUs", UIDS["gpus"])
HOST = ("Host", UIDS["host"])
AGENTS = ("Agents", UIDS["agents"])
# Tile colours by the severity of the alert the tile stands for.
WARNING, CRITICAL, INFO = "orange", "red", "blue"
NO_ENGINE, NO_CARD = "no engine", "no card"
# A rule's expression reads 0 while its condition does not hold.
NOT_HELD = [{"type": "value", "options": {"0": {"text": "no", "index": 0}}}]
UP = [{"type": "value", "options": {
    "0": {"text": "down", "index": 0}, "1": {"text": "up", "index": 1}}}]


def _worst(fn: str, expr: str, by: str) -> str:
    """The worst (`fn`: max, or min for a value bad when low) of the range, per `by`."""
    return f"{fn} by ({by}) ({over_range(fn, expr)})"


def _tiles(*pairs: tuple[str, str]) -> list:
    return targets(*pairs, instant=True)


def _while(condition: str, base: str, by: str) -> str:
    """The worst value of a rule's expression while its condition held, else 0 for each
    series of `base` (one that every engine or card has from its first scrape: the
    rules' own counters may not exist until their first event)."""
    return or_zero(_worst("max", condition, by), base, by)


def _decode(t: Thresholds) -> list:
    stall_mid = (f"({over_range('max', sel('rig_engine_decode_stall_max_seconds'))}"
                 f" + {over_range('max', sel('rig_engine_decode_stall_max_upper_seconds'))})"
                 " / 2")
    queued = sel("rig_engine_queued_requests")
    return [
        stat(
            "Decode: longest gap",
            "The longest wait for a token, per engine: the stall tracker's (the middle of"
            " what it knows, as the rules judge it), the probe's and the stream tap's (when"
            f" on). Orange from {t.decode_stutter_seconds:g} s (stutter), red from"
            f" {t.decode_stall_critical_seconds:g} s (starvation).",
            "s",
            _tiles(
                (f"max by ({BY_RIG_ENGINE}) ({stall_mid})", "{{engine}} tracker"),
                (_worst("max", sel("rig_probe_max_token_gap_seconds"), BY_RIG_ENGINE),
                 "{{engine}} probe"),
                (_worst("max", sel("rig_stream_max_token_gap_seconds"), BY_RIG_ENGINE),
                 "{{engine}} tap"),
            ),
            thresholds=steps((WARNING, t.decode_stutter_seconds),
                             (CRITICAL, t.decode_stall_critical_seconds)),
            link=DECODE, alerts=("RigDecodeStarvation", "RigDecodeStuttering"),
            no_value=NO_ENGINE, w=6,
        ),
        stat(
            "Engines",
            "Whether each engine's /metrics answers (engine/<name>) and its stream probe is"
            " served: down or wedged at any moment of the range shows here.",
            "none",
            _tiles(
                (_worst("min", sel("rig_source_up", ENGINE_SOURCES), "rig, source"),
                 "{{source}}"),
                (_worst("min", sel("rig_probe_success"), BY_RIG_ENGINE), "{{engine}} probe"),
            ),
            thresholds=falling_steps((CRITICAL, 1)),
            mappings=UP,
            link=DECODE, alerts=("RigEngineDown", "RigEngineWedged"), no_value=NO_ENGINE,
        ),
        stat(
            "Queue behind a running request",
            "Requests waiting while another runs (head-of-line blocking), per engine; a queue"
            " with nothing running is a wedged engine (the Engines tile).",
            "short",
            _tiles((_while(f"{queued} and on ({ENGINE_SERIES})"
                            f" {sel('rig_engine_running_requests')} > 0", queued, BY_RIG_ENGINE),
                     "{{engine}} queued")),
            thresholds=steps((WARNING, 1)),
            link=DECODE, alerts=("RigQueueHeadOfLine",), no_value=NO_ENGINE,
        ),
        stat(
            "Speculative decoding",
            "The fewest tokens accepted per decode step while decoding, per engine (absent"
            " without speculative decoding).",
            "short",
            _tiles((_worst("min", f"{sel('rig_engine_spec_accept_length')}"
                            f" and on ({ENGINE_SERIES})"
                            f" {rate('rig_engine_decode_batches_total', fn='increase')} > 0",
                            BY_RIG_ENGINE), "{{engine}}")),
            thresholds=falling_steps((WARNING, t.spec_accept_length)),
            link=DECODE, alerts=("RigSpecDecodeAcceptanceLow",),
            no_value="no speculative decoding",
        ),
        stat(
            "TTFT p99",
            "Time to first token, p99 over the last rate interval, from the engine's"
            " histogram: the wait an agent sees before its answer starts.",
            "s",
            # NaN (no request in the interval) compares false: no value, "no requests".
            _tiles((f"histogram_quantile(0.99, sum by (rig, engine, le)"
                    f" ({rate('rig_engine_time_to_first_token_seconds_bucket')})) >= 0",
                    "{{engine}}")),
            thresholds=steps(), link=DECODE, no_value="no requests", w=6,
        ),
    ]


def _cache(t: Thresholds) -> list:
    kv = sel("rig_engine_kv_usage_ratio")
    retracted = (f"sum by ({BY_RIG_ENGINE}) "
                 f"({rate('rig_engine_retracted_requests_total', fn='increase')})")
    capacity = sel("rig_engine_kv_capacity_tokens")
    host_capacity = sel("rig_engine_hicache_host_capacity_tokens")
    recomputed = f"1 - {sel(ANY_HIT_SHARE)}"
    agents = sel("rig_agent_last_prompt_tokens")
    context = f"sum by ({BY_RIG_ENGINE}) ({agents})"
    # HiCache's L2 counts only where it is on.
    # Both pools are series of one target, alike in every label: a plain `+` keeps
    # them all (an `on (...)` keeps only its own, and lost `rig`).
    pool = f"sum by ({BY_RIG_ENGINE}) ({capacity} + ({host_capacity} or {capacity} * 0))"
    return [
        stat(
            "KV pool",
            f"The fullest KV pool usage per engine (warning from {t.kv_usage_ratio:.0%}), and"
            " requests retracted for lack of KV space (any is a warning).",
            "percentunit",
            _tiles((_worst("max", kv, BY_RIG_ENGINE), "{{engine}} used"),
                    (or_zero(retracted, kv, BY_RIG_ENGINE), "{{engine}} retracted")),
            thresholds=steps((WARNING, t.kv_usage_ratio)),
            overrides=[scoped("B", steps((WARNING, just_above(0))), unit="short")],
            link=HICACHE, alerts=("RigKVPoolSaturated",), no_value=NO_ENGINE,
        ),
        stat(
            "HiCache L2 pool",
            "The fullest L2 host pool per engine; warning from"
            f" {t.hicache_host_pool_ratio:.0%} (full while L1 evicts into it).",
            "percentunit",
            _tiles((_worst("max", sel(HOST_USAGE), BY_RIG_ENGINE), "{{engine}}")),
            thresholds=steps((WARNING, t.hicache_host_pool_ratio)),
            link=HICACHE, alerts=("RigHiCacheHostPoolFull",), no_value="no HiCache",
        ),
        stat(
            "HiCache thrash",
            "Tokens per second moving down to L2 and back (5 min) while L2 serves under"
            f" {t.hicache_l2_hit_ratio:.0%} of prompts, and prompt tokens recomputed in"
            f" {dur(t.hicache_recompute_window_seconds)} while L1 evicts into a full L2:"
            " each the rule's own expression, 0 while its condition does not hold.",
            "short",
            _tiles(
                (_while(rule_expr(t, "RigHiCacheThrash", "churn"), kv, BY_RIG_ENGINE),
                 "{{engine}} churn tok/s"),
                (_while(rule_expr(t, "RigHiCacheThrash", "recompute"), kv, BY_RIG_ENGINE),
                 "{{engine}} recomputed tok"),
            ),
            thresholds=steps((WARNING, just_above(0))),
            link=HICACHE, alerts=("RigHiCacheThrash",), no_value="no HiCache",
        ),
        stat(
            "HiCache L3 misses",
            f"Tokens written to L3 in {dur(t.hicache_storage_window_seconds)} with none"
            " prefetched back while long prompts missed every tier and L2 was"
            f" {t.hicache_storage_l2_ratio:.0%} full (the L3 addressing bug): the rule's"
            " own expression, 0 while its condition does not hold.",
            "short",
            _tiles((_while(rule_expr(t, "RigHiCacheStorageMisses"), kv, BY_RIG_ENGINE),
                     "{{engine}} written, none back")),
            thresholds=steps((WARNING, just_above(0))),
            link=HICACHE, alerts=("RigHiCacheStorageMisses",), no_value="no L3",
        ),
        stat(
            "Prompt tokens recomputed",
            "The share of prompt tokens no cache tier held (5 min), the most over the range:"
            " each is prefilled again.",
            "percentunit",
            _tiles((_worst("max", recomputed, BY_RIG_ENGINE), "{{engine}}")),
            thresholds=steps(), link=HICACHE, no_value=NO_ENGINE,
        ),
        stat(
            "Agents' context against the pool",
            "The prompt tokens of every agent's last turn, summed per engine, over the tokens"
            " its KV pool and HiCache L2 hold: above 100 % the sessions cannot all stay"
            " cached. Shows once the exporter exports its agents.",
            "percentunit",
            _tiles((_worst("max", f"{context} / on ({BY_RIG_ENGINE}) {pool}", BY_RIG_ENGINE),
                    "{{engine}}")),
            thresholds=steps(), link=HICACHE, no_value="no agents",
        ),
    ]


def _agents(t: Thresholds) -> list:
    """One tile per agent alert, each its rule's own expression (0 while its condition
    does not hold), per engine with a tap that names agents."""
    base = sel("rig_agent_streams_active")

    def tile(title: str, description: str, unit: str, alert: str,
             *signals: tuple[str, str]) -> object:
        return stat(
            title, description + " The rule's own expression, 0 while it does not hold.",
            unit,
            _tiles(*((_while(rule_expr(t, alert, signal), base, BY_RIG_ENGINE), legend)
                     for signal, legend in signals)),
            thresholds=steps((WARNING, just_above(0))),
            link=AGENTS, alerts=(alert,), no_value="no agents",
        )

    return [
        tile("Agent holding the engine",
             f"The age of an agent's request running {t.agent_hog_running_seconds // 60} min"
             f" or more while another has waited {t.agent_hog_waiting_seconds // 60} min for"
             " its first token.", "s", "RigAgentHoggingEngine", ("", "{{engine}}")),
        tile("Runaway answer",
             f"A response in flight past {t.agent_runaway_tokens:,} tokens, or past"
             f" {t.agent_runaway_tokens // 4:,} without a token limit.", "short",
             "RigAgentRunawayOutput", ("size", "{{engine}} any"),
             ("unbounded", "{{engine}} unbounded")),
        tile("Agent context near its limit",
             f"An agent's last prompt over the context length, from {t.agent_context_ratio:.0%}.",
             "percentunit", "RigAgentContextNearLimit", ("", "{{engine}}")),
        tile("Agents' working set over the pool",
             "The agents' last prompts summed, where they exceed the KV pool (L1, + L2 with"
             " HiCache).", "short", "RigAgentsWorkingSetOverPool", ("", "{{engine}}")),
        tile("Agent recomputing",
             f"An agent's uncached share of prompt tokens over"
             f" {dur(t.agent_recompute_window_seconds)}, where most of them were uncached in"
             f" {t.agent_recompute_requests} or more requests.", "percentunit",
             "RigAgentRecomputing", ("", "{{engine}}")),
    ]


def _gpus(t: Thresholds) -> list:
    present = sel("rig_gpu_present")
    expected = sel("rig_gpu_expected_cards")
    return [
        stat(
            "GPU headroom",
            "The least distance of each card's junction and memory temperature to its"
            f" critical limit: warning at {t.gpu_hot_margin_celsius:g} °C or less (hot), red"
            f" at {t.gpu_junction_margin_celsius:g} °C or less (where a busy card downclocks).",
            "celsius",
            _tiles((_worst("min", sel(HEADROOM, HOT_SENSORS_MATCHER), "rig, card, sensor"),
                     "{{card}} {{sensor}}")),
            thresholds=falling_steps((CRITICAL, t.gpu_junction_margin_celsius),
                                     (WARNING, t.gpu_hot_margin_celsius), inclusive=True),
            link=GPUS, alerts=("RigGpuHot",), no_value=NO_CARD, w=6,
        ),
        stat(
            "GPU thermal downclock",
            "Each card's shader clock over its maximum while the rule's condition holds:"
            f" under {t.gpu_sclk_ratio:.0%} while busy and at its thermal limit; no when not.",
            "percentunit",
            _tiles((_while(rule_expr(t, "RigGpuThermalDownclock", severity="warning"),
                            present, BY_RIG_CARD), "{{card}}")),
            thresholds=steps((WARNING, just_above(0))), mappings=NOT_HELD,
            link=GPUS, alerts=("RigGpuThermalDownclock",), no_value=NO_CARD,
        ),
        stat(
            "GPU power cap",
            "Each card's power over its cap while the power limit holds its clock (PPT"
            f" throttle set, {t.gpu_power_cap_ratio:.0%} of the cap or more): working as"
            " configured, for information; no when not.",
            "percentunit",
            _tiles((_while(f"{sel('rig_gpu_power_watts')} / {sel('rig_gpu_power_cap_watts')}"
                            f" and ({rule_expr(t, 'RigGpuPowerCapped')})", present, BY_RIG_CARD),
                     "{{card}}")),
            thresholds=steps((INFO, just_above(0))), mappings=NOT_HELD,
            link=GPUS, alerts=("RigGpuPowerCapped",), no_value=NO_CARD,
        ),
        stat(
            "GPUs missing",
            "Cards the rig should have ([gpu] expected_cards) that are not on the bus, and"
            " each card that vanished (present 0).",
            "none",
            _tiles(
                (_worst("max", f"{expected} - on (job, instance, rig)"
                        f" (count by (job, instance, rig) ({present} == 1) or {expected} * 0)",
                        "rig"), "cards missing"),
                (_worst("max", f"1 - {present}", BY_RIG_CARD), "{{card}} vanished"),
            ),
            thresholds=steps((CRITICAL, 1)),
            link=GPUS, alerts=("RigGpuMissing",), no_value=NO_CARD, w=6,
        ),
        stat(
            "PCIe width",
            "The narrowest current link of any card or its upstream port, in lanes; narrower"
            f" than x{t.gpu_pcie_min_width_lanes} is degraded.",
            "none",
            _tiles((_worst("min", sel("rig_gpu_pcie_link_width_lanes", 'kind="current"'),
                            BY_RIG_CARD), "{{card}}")),
            thresholds=falling_steps((WARNING, t.gpu_pcie_min_width_lanes)),
            link=GPUS, alerts=("RigGpuPcieDegraded",), no_value=NO_CARD,
        ),
    ]


def _host(t: Thresholds) -> list:
    growth = (f"deriv({sel('rig_host_swap_used_bytes')}"
              f"[{dur(t.host_swap_growth_window_seconds)}])")
    full_stall = rate("rig_host_memory_pressure_stall_seconds_total", 'kind="full"')
    sources = sel("rig_source_up", OTHER_SOURCES)
    return [
        stat(
            "Host memory",
            "The least RAM available (critical under"
            f" {t.host_memory_available_ratio:.0%}), the most time every task stalled on"
            f" memory (critical from {t.host_memory_full_stall_ratio:.0%}), swap I/O (warning"
            f" from {t.host_swap_io_bytes_per_second / 2**20:g} MiB/s over 5 min) and swap"
            f" growth (warning from {t.host_swap_growth_bytes_per_second / 1024:g} KiB/s over"
            f" {dur(t.host_swap_growth_window_seconds)}).",
            "percentunit",
            _tiles(
                (_worst("min", sel(MEM_AVAILABLE), "rig, instance"), "RAM available"),
                (_worst("max", full_stall, "rig, instance"), "full stall"),
                (_worst("max", sel(SWAP_IO), "rig, instance"), "swap I/O"),
                (_worst("max", growth, "rig, instance"), "swap growth"),
            ),
            thresholds=falling_steps((CRITICAL, t.host_memory_available_ratio)),
            overrides=[
                scoped("B", steps((CRITICAL, t.host_memory_full_stall_ratio))),
                scoped("C", steps((WARNING, t.host_swap_io_bytes_per_second)), unit="Bps"),
                scoped("D", steps((WARNING, t.host_swap_growth_bytes_per_second)), unit="Bps"),
            ],
            link=HOST, alerts=("RigHostMemoryPressure", "RigHostSwapping"), w=10,
        ),
        stat(
            "CPU temperature",
            f"The hottest CPU sensor; warning from {t.cpu_temperature_celsius:g} °C.",
            "celsius",
            _tiles((_worst("max", sel("rig_host_cpu_temperature_celsius"), "rig, instance"),
                     "CPU")),
            thresholds=steps((WARNING, t.cpu_temperature_celsius)),
            link=HOST, alerts=("RigCpuHot",), no_value="no sensor",
        ),
        stat(
            "Exporter sources",
            "Whether every source of every exporter but the engines' (the Engines tile)"
            " answered its scrapes: a source down at any moment of the range shows here.",
            "none",
            # Each source down by name; all up is one "all" value.
            _tiles((f"({_worst('min', sources, 'rig, source')} < 1) or label_replace("
                    f"{_worst('min', sources, 'rig')}, \"source\", \"all\", \"\", \"\")",
                    "{{source}}")),
            thresholds=falling_steps((CRITICAL, 1)), mappings=UP,
            link=HOST, alerts=("RigExporterSourceDown",), w=10,
        ),
    ]


def _alerts() -> Section:
    labels = "{{alertname}} {{severity}} {{signal}} {{card}} {{sensor}} {{engine}}"
    pending, firing = (sel("ALERTS", 'alertname=~"Rig.+"', f'alertstate="{state}"')
                       for state in ALERT_STATE_COLORS)
    return Section("Alerts", [state_timeline(
        "Rig alerts pending and firing",
        "Each rig alert while it is pending (its condition holds, waiting out its `for`),"
        " in orange, or firing, in red, with the labels that tell its rules, cards and"
        " engines apart. Empty on a healthy rig.",
        [target(f"max by ({ALERT_LABELS}) ({pending} or {firing} * 2)", labels)],
        mappings=[{"type": "value", "options": {
            "1": {"text": "pending", "color": ALERT_STATE_COLORS["pending"], "index": 0},
            "2": {"text": "firing", "color": ALERT_STATE_COLORS["firing"], "index": 1},
        }}],
        unit="none", h=6,
    )])


def _glance() -> Section:
    return Section("The rig at a glance", [
        timeseries(
            "HiCache hit share by tier",
            "The share of prompt tokens each tier served over 5 min (L1 GPU, L2 host RAM,"
            " L3 storage).",
            "percentunit",
            targets((sel(HIT_SHARE),
                     "{{engine}} {{tier}}")),
            min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "GPU junction temperature",
            "Junction temperature of each card, the hottest of each interval; its critical"
            " limit is on the GPUs dashboard.",
            "celsius",
            targets((over_interval("max", sel("rig_gpu_temperature_celsius",
                                              'sensor="junction"')), "{{card}}")),
            w=8,
        ),
        timeseries(
            "GPU sclk",
            "Shader clock of each card, the slowest of each interval.",
            "hertz",
            targets((over_interval("min", sel("rig_gpu_clock_hertz", 'clock="sclk"')),
                     "{{card}}")),
            w=8,
        ),
        timeseries(
            "Free RAM and swap used",
            "Available host RAM (left axis) and swap in use (right axis, its own scale:"
            " tens of MiB against tens of GiB).",
            "bytes",
            targets(
                (over_interval("min", sel("rig_host_memory_available_bytes")),
                 "{{instance}} RAM available"),
                (over_interval("max", sel("rig_host_swap_used_bytes")),
                 "{{instance}} swap used"),
            ),
            overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [{"id": "custom.axisPlacement", "value": "right"}]}],
            min_value=0, w=24,
        ),
    ])


def build(t: Thresholds) -> Dashboard:
    return rig_dashboard(
        "Rig: overview",
        UIDS["overview"],
        "A tile per failure, coloured by its alert's own threshold and showing the worst of"
        " the time range per engine or card, linking to the dashboard that explains it; TTFT,"
        " the share recomputed and the agents' context against the pool; the alerts pending"
        " and firing; HiCache hits, GPU junction and clock, free RAM and swap.",
        [Section("Decode and engines", _decode(t)), Section("KV and HiCache", _cache(t)),
         Section("Agents", _agents(t)),
         Section("GPUs", _gpus(t)), Section("Host", _host(t)), _alerts(), _glance()],
    )


dashboard = build(Thresholds())

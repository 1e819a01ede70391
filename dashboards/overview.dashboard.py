"""Rig overview: one stat per alert family, then the rig at a glance (docs/dashboards.md).

Each stat shows the value its alert family judges, coloured by the same
thresholds the rules use (so it turns red when the alert's condition holds, before
its `for` has passed), and links to the dashboard that explains it.
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from alerts.rules.common import CHURN_RATE, HEADROOM, HOST_USAGE, MEM_AVAILABLE, SCLK_RATIO, SWAP_IO
from dashboards.panels import (
    UIDS,
    Section,
    falling_steps,
    on_off,
    rate,
    rig_dashboard,
    sel,
    stat,
    state_timeline,
    steps,
    targets,
    timeseries,
)
from exporter.thresholds import Thresholds

ENGINE_SOURCES = 'source=~"engine/.+"'
HOT_SENSORS = 'sensor=~"junction|memory"'
CURRENT = 'kind="current"'
RIG_ALERTS = 'alertname=~"Rig.+"'
DECODE = ("Decode and latency", UIDS["decode"])
HICACHE = ("KV and HiCache", UIDS["hicache"])
GPUS = ("GPUs", UIDS["gpus"])
HOST = ("Host", UIDS["host"])
AGENTS = ("Agents", UIDS["agents"])


def _families(t: Thresholds) -> list:
    up = on_off("down", "up", on_color="green", off_color="red")
    return [
        stat(
            "Decode: longest gap",
            "The longest wait for a token in the last minute, per view: stall tracker, probe"
            " and stream tap (when on).",
            "s",
            targets(
                (f"max({sel('rig_engine_decode_stall_max_seconds')})", "tracker"),
                (f"max({sel('rig_probe_max_token_gap_seconds')})", "probe"),
                (f"max({sel('rig_stream_max_token_gap_seconds')})", "tap"),
            ),
            thresholds=steps(("orange", t.decode_stutter_seconds),
                             ("red", t.decode_stall_critical_seconds)),
            link=DECODE, alerts=("RigDecodeStarvation", "RigDecodeStuttering"),
        ),
        stat(
            "Engines",
            "Whether every engine's /metrics answers, and whether every stream probe is"
            " served.",
            "none",
            targets(
                (f"min({sel('rig_source_up', ENGINE_SOURCES)})", "reachable"),
                (f"min({sel('rig_probe_success')})", "probe"),
            ),
            thresholds=falling_steps(("red", 1)), mappings=up,
            link=DECODE, alerts=("RigEngineDown", "RigEngineWedged"),
        ),
        stat(
            "Queue",
            "Requests waiting in the engines' queues, and running.",
            "short",
            targets(
                (f"sum({sel('rig_engine_queued_requests')})", "queued"),
                (f"sum({sel('rig_engine_running_requests')})", "running"),
            ),
            thresholds=steps(("orange", 1)),
            link=DECODE, alerts=("RigQueueHeadOfLine",),
        ),
        stat(
            "Agents",
            "The oldest streaming request of any agent in flight, and the longest any agent"
            " has waited for a first token (stream tap; no data without one).",
            "s",
            targets(
                (f"max({sel('rig_agent_longest_request_seconds')})", "running"),
                (f"max({sel('rig_agent_longest_first_token_wait_seconds')})", "waiting"),
            ),
            thresholds=steps(("orange", t.agent_hog_waiting_seconds),
                             ("red", t.agent_hog_running_seconds)),
            link=AGENTS, alerts=("RigAgentHoggingEngine", "RigAgentRunawayOutput",
                                 "RigAgentContextNearLimit", "RigAgentsWorkingSetOverPool",
                                 "RigAgentRecomputing"),
        ),
        stat(
            "Speculative decoding",
            "The lowest engine's accepted tokens per decode step (no data without"
            " speculative decoding).",
            "short",
            targets((f"min({sel('rig_engine_spec_accept_length')})", "per step")),
            thresholds=falling_steps(("orange", t.spec_accept_length)),
            link=DECODE, alerts=("RigSpecDecodeAcceptanceLow",),
        ),
        stat(
            "KV pool",
            "The fullest engine's KV pool usage.",
            "percentunit",
            targets((f"max({sel('rig_engine_kv_usage_ratio')})", "used")),
            thresholds=steps(("red", t.kv_usage_ratio)),
            link=HICACHE, alerts=("RigKVPoolSaturated",),
        ),
        stat(
            "HiCache L2 pool",
            "The fullest L2 host pool.",
            "percentunit",
            targets((f"max({sel(HOST_USAGE)})", "used")),
            thresholds=steps(("red", t.hicache_host_pool_ratio)),
            link=HICACHE, alerts=("RigHiCacheHostPoolFull",),
        ),
        stat(
            "HiCache churn",
            "The highest L1/L2 churn: tokens per second that went down to L2 and came back"
            " (5 min).",
            "short",
            targets((f"max({sel(CHURN_RATE)})", "tokens/s")),
            thresholds=steps(("orange", t.hicache_churn_tokens_per_second)),
            link=HICACHE, alerts=("RigHiCacheThrash",),
        ),
        stat(
            "HiCache L3",
            "Tokens per second written to L3 and prefetched back from it. Writes with no"
            " prefetch is the L3 addressing bug.",
            "short",
            targets(
                (f"sum({rate('rig_engine_hicache_storage_written_tokens_total')})",
                 "written"),
                (f"sum({rate('rig_engine_hicache_storage_prefetched_tokens_total')})",
                 "prefetched"),
            ),
            thresholds=steps(),
            link=HICACHE, alerts=("RigHiCacheStorageMisses",),
        ),
        stat(
            "GPU headroom",
            "The smallest distance of any card's junction or memory temperature to its"
            " critical limit.",
            "celsius",
            targets((f"min({sel(HEADROOM, HOT_SENSORS)})", "headroom")),
            thresholds=falling_steps(("red", t.gpu_junction_margin_celsius),
                                     ("orange", t.gpu_hot_margin_celsius)),
            link=GPUS, alerts=("RigGpuHot", "RigGpuThermalDownclock"),
        ),
        stat(
            "GPU sclk",
            "The slowest card's shader clock as a share of its maximum.",
            "percentunit",
            targets((f"min({sel(SCLK_RATIO)})", "sclk")),
            thresholds=falling_steps(("orange", t.gpu_sclk_ratio)),
            link=GPUS, alerts=("RigGpuThermalDownclock",),
        ),
        stat(
            "GPU power",
            "The card closest to its power cap: power over cap.",
            "percentunit",
            targets((f"max({sel('rig_gpu_power_watts')} / {sel('rig_gpu_power_cap_watts')})",
                     "of cap")),
            thresholds=steps(("blue", t.gpu_power_cap_ratio)),
            link=GPUS, alerts=("RigGpuPowerCapped",),
        ),
        stat(
            "GPUs missing",
            "Cards the rig should have ([gpu] expected_cards, exported as"
            " rig_gpu_expected_cards) minus the cards on the bus among those read.",
            "none",
            targets((f"sum({sel('rig_gpu_expected_cards')})"
                     f" - (sum({sel('rig_gpu_present')} == 1) or vector(0))", "missing")),
            thresholds=steps(("red", 1)),
            link=GPUS, alerts=("RigGpuMissing",),
        ),
        stat(
            "PCIe",
            "The narrowest current PCIe link of any card or its upstream port.",
            "none",
            targets((f"min({sel('rig_gpu_pcie_link_width_lanes', CURRENT)})",
                     "lanes")),
            thresholds=falling_steps(("orange", t.gpu_pcie_min_width_lanes)),
            link=GPUS, alerts=("RigGpuPcieDegraded",),
        ),
        stat(
            "RAM available",
            "The host's available RAM as a share of the total.",
            "percentunit",
            targets((f"min({sel(MEM_AVAILABLE)})", "available")),
            thresholds=falling_steps(("red", t.host_memory_available_ratio)),
            link=HOST, alerts=("RigHostMemoryPressure",),
        ),
        stat(
            "Swap I/O",
            "Bytes per second moving to and from swap (5 min).",
            "Bps",
            targets((f"max({sel(SWAP_IO)})", "swap")),
            thresholds=steps(("orange", t.host_swap_io_bytes_per_second)),
            link=HOST, alerts=("RigHostSwapping",),
        ),
        stat(
            "CPU temperature",
            "The hottest CPU sensor.",
            "celsius",
            targets((f"max({sel('rig_host_cpu_temperature_celsius')})", "CPU")),
            thresholds=steps(("orange", t.cpu_temperature_celsius)),
            link=HOST, alerts=("RigCpuHot",),
        ),
        stat(
            "Exporter sources",
            "Whether every source of every exporter answered its last scrape.",
            "none",
            targets((f"min({sel('rig_source_up')})", "sources")),
            thresholds=falling_steps(("red", 1)), mappings=up,
            link=HOST, alerts=("RigExporterSourceDown",),
        ),
    ]


def build(t: Thresholds) -> Dashboard:
    families = Section("Alert families", _families(t))
    alerts = Section("Alerts", [
        state_timeline(
            "Rig alerts pending and firing",
            "Each rig alert while it is pending (its condition holds, waiting out its `for`)"
            " or firing, from Prometheus' ALERTS series. Empty on a healthy rig.",
            targets((f"max by (alertname, alertstate, severity) "
                     f"({sel('ALERTS', RIG_ALERTS)})",
                     "{{alertname}} {{severity}} {{alertstate}}")),
            mappings=on_off("off", "active", on_color="red"),
            h=6,
        ),
    ])
    glance = Section("The rig at a glance", [
        timeseries(
            "HiCache hit share by tier",
            "The share of prompt tokens each tier served over 5 min (L1 GPU, L2 host RAM,"
            " L3 storage).",
            "percentunit",
            targets((sel("engine_tier:rig_engine_cache_hit_tokens:ratio_rate5m"),
                     "{{engine}} {{tier}}")),
            min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "GPU junction temperature",
            "Junction temperature of each card; its critical limit is on the GPUs dashboard.",
            "celsius",
            targets((sel("rig_gpu_temperature_celsius", 'sensor="junction"'), "{{card}}")),
            w=8,
        ),
        timeseries(
            "GPU sclk",
            "Shader clock of each card.",
            "hertz",
            targets((sel("rig_gpu_clock_hertz", 'clock="sclk"'), "{{card}}")),
            w=8,
        ),
        timeseries(
            "Free RAM and swap used",
            "Available host RAM and swap in use.",
            "bytes",
            targets(
                (sel("rig_host_memory_available_bytes"), "{{instance}} RAM available"),
                (sel("rig_host_swap_used_bytes"), "{{instance}} swap used"),
            ),
            min_value=0, w=24,
        ),
    ])
    return rig_dashboard(
        "Rig: overview",
        UIDS["overview"],
        "One stat per alert family, coloured by the alert thresholds and linking to its"
        " dashboard; the alerts pending and firing; HiCache hits, GPU junction and clock,"
        " free RAM and swap.",
        [families, alerts, glance],
    )


dashboard = build(Thresholds())

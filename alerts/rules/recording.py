"""Recording rules shared by the alerts and the dashboards."""

from __future__ import annotations

from alerts.rules.common import (
    ANY_HIT_SHARE,
    CHURN_RATE,
    HEADROOM,
    HIT_SHARE,
    HOST_USAGE,
    MEM_AVAILABLE,
    PROMPT_RATE,
    SCLK_RATIO,
    SWAP_IO,
    dur,
)
from exporter.thresholds import Thresholds


def recording_rules(t: Thresholds) -> list[dict[str, str]]:
    w = dur(t.rate_window_seconds)
    hits_rate = f"rate(rig_engine_cache_hit_tokens_total[{w}])"
    rules = {
        "engine:rig_engine_generation_tokens:rate1m": (
            "rate(rig_engine_generation_tokens_total[1m])"
        ),
        PROMPT_RATE: f"rate(rig_engine_prompt_tokens_total[{w}])",
        "engine:rig_engine_decode_batches:rate1m": "rate(rig_engine_decode_batches_total[1m])",
        # Per-tier hit share of prompt tokens (counter ratio: sglang#26608
        # shows the cache_hit_rate gauge is overwritten per batch).
        HIT_SHARE: (
            f"{hits_rate} / ignoring (tier) group_left () ({PROMPT_RATE} > 0)"
        ),
        ANY_HIT_SHARE: (
            f"(sum without (tier) ({hits_rate}) or {PROMPT_RATE} * 0) / ({PROMPT_RATE} > 0)"
        ),
        # L1<->L2 churn: tokens that both left L1 and came back up from L2,
        # i.e. the smaller of the eviction and load-back rates.
        CHURN_RATE: (
            f"rate(rig_engine_hicache_evicted_tokens_total[{w}])"
            f" <= rate(rig_engine_hicache_loaded_back_tokens_total[{w}])"
            f" or rate(rig_engine_hicache_loaded_back_tokens_total[{w}])"
        ),
        HOST_USAGE: (
            "rig_engine_hicache_host_used_tokens / (rig_engine_hicache_host_capacity_tokens > 0)"
        ),
        SCLK_RATIO: (
            'rig_gpu_clock_hertz{clock="sclk"} / (rig_gpu_clock_max_hertz{clock="sclk"} > 0)'
        ),
        HEADROOM: (
            'rig_gpu_temperature_limit_celsius{limit="critical"}'
            " - ignoring (limit) rig_gpu_temperature_celsius"
        ),
        MEM_AVAILABLE: "rig_host_memory_available_bytes / (rig_host_memory_total_bytes > 0)",
        SWAP_IO: (
            f"rate(rig_host_swap_in_bytes_total[{w}]) + rate(rig_host_swap_out_bytes_total[{w}])"
        ),
    }
    return [{"record": name, "expr": expr} for name, expr in rules.items()]

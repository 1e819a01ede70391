"""KV and HiCache: how the KV cache fills and moves between tiers (docs/dashboards.md).

L1 is GPU memory, L2 the host-RAM pool, L3 storage (NVMe). Hit shares are counter
ratios from the recording rules the alerts use (alerts/rules/recording.py), not
SGLang's per-batch `cache_hit_rate` gauge (sglang#26608).
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from alerts.rules.common import ANY_HIT_SHARE, CHURN_RATE, HIT_SHARE, HOST_USAGE
from dashboards.panels import (
    TOKENS,
    TOKENS_PER_SECOND,
    UIDS,
    Section,
    falling_steps,
    just_above,
    over_interval,
    rate,
    rig_dashboard,
    sel,
    stat,
    steps,
    targets,
    timeseries,
)
from exporter.thresholds import Thresholds


def build(t: Thresholds) -> Dashboard:
    kv = Section("KV pool (L1)", [
        timeseries(
            "KV pool usage",
            "The share of the engine's KV token pool in use (max over ranks). Dashed line:"
            f" {t.kv_usage_ratio:.0%}, held {t.kv_saturated_for_seconds // 60} min, is"
            " saturation.",
            "percentunit",
            targets((over_interval("max", sel("rig_engine_kv_usage_ratio")), "{{engine}}")),
            thresholds=steps(("orange", t.kv_usage_ratio)),
            alerts=("RigKVPoolSaturated",),
            min_value=0, max_value=1, w=12,
        ),
        stat(
            "Pool sizes",
            "Tokens the KV pool holds per data-parallel group (tensor-parallel ranks hold"
            " shards of the same tokens and are never added) and the HiCache L2 host pool"
            " holds; they change only on a restart.",
            TOKENS,
            targets((sel("rig_engine_kv_capacity_tokens"), "{{engine}} KV pool"),
                    (sel("rig_engine_hicache_host_capacity_tokens"), "{{engine}} L2 pool"),
                    instant=True),
            thresholds=steps(), no_value="no engine", w=8, h=8,
        ),
        stat(
            "Retracted requests",
            "Running requests the scheduler retracted (preempted) for lack of KV space over"
            " the time range. Any retraction means the pool overflowed.",
            "short",
            targets((f"sum by (rig, engine) (increase("
                     f"{sel('rig_engine_retracted_requests_total')}[$__range]))", "{{engine}}"),
                    instant=True),
            thresholds=steps(("orange", just_above(0))),
            alerts=("RigKVPoolSaturated",), no_value="no engine", w=4, h=8,
        ),
    ])
    hits = Section("Prompt tokens served from cache", [
        timeseries(
            "Hit share of prompt tokens by tier",
            "The share of prompt tokens each tier served over 5 min (L1 GPU, L2 host RAM,"
            " L3 storage), and the share no tier held (recomputed). Dashed line: an L2 share"
            f" under {t.hicache_l2_hit_ratio:.0%} while tokens churn between L1 and L2 is"
            " thrash.",
            "percentunit",
            targets(
                (sel(HIT_SHARE, 'tier="L2"'), "{{engine}} {{tier}}"),
                (sel(HIT_SHARE, 'tier!="L2"'), "{{engine}} {{tier}}"),
                (f"1 - {sel(ANY_HIT_SHARE)}", "{{engine}} recomputed"),
            ),
            thresholds=falling_steps(("orange", t.hicache_l2_hit_ratio)),
            alerts=("RigHiCacheThrash",),
            min_value=0, max_value=1,
        ),
        timeseries(
            "Prompt and cache-hit tokens/s",
            "Prompt tokens per second, and those each tier served from cache.",
            TOKENS_PER_SECOND,
            targets(
                (rate("rig_engine_prompt_tokens_total"), "{{engine}} prompt"),
                (rate("rig_engine_cache_hit_tokens_total"), "{{engine}} hit {{tier}}"),
            ),
        ),
    ])
    movement = Section("L1 and L2 (host RAM)", [
        timeseries(
            "L2 host pool occupancy",
            "The share of the HiCache host pool (L2) in use. Dashed line:"
            f" {t.hicache_host_pool_ratio:.0%}; full while L1 keeps evicting means sessions"
            " fall out of every tier.",
            "percentunit",
            targets((over_interval("max", sel(HOST_USAGE)), "{{engine}}")),
            thresholds=steps(("orange", t.hicache_host_pool_ratio)),
            alerts=("RigHiCacheHostPoolFull", "RigHiCacheThrash"),
            min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "Eviction, load-back, backup",
            "Tokens per second evicted from L1, loaded back from L2 into L1, and backed up"
            " from L1 to L2; churn is the smaller of eviction and load-back (tokens that went"
            f" down and came back). Dashed line: {t.hicache_churn_tokens_per_second:g}"
            " tokens/s of churn.",
            TOKENS_PER_SECOND,
            targets(
                (rate("rig_engine_hicache_evicted_tokens_total"), "{{engine}} evicted"),
                (rate("rig_engine_hicache_loaded_back_tokens_total"), "{{engine}} loaded back"),
                (rate("rig_engine_hicache_backed_up_tokens_total"), "{{engine}} backed up"),
                (sel(CHURN_RATE), "{{engine}} churn (5m)"),
            ),
            thresholds=steps(("orange", t.hicache_churn_tokens_per_second)), judged=("D",),
            alerts=("RigHiCacheThrash",),
            w=16,
        ),
    ])
    storage = Section("L3 (storage)", [
        timeseries(
            "L3 prefetch against writes",
            "Tokens per second written from L2 to L3 and prefetched back from L3. Writes with"
            " no prefetch while long prompts miss every tier is the L3 addressing bug."
            " Absent unless an L3 backend is configured.",
            TOKENS_PER_SECOND,
            targets(
                (rate("rig_engine_hicache_storage_written_tokens_total"), "{{engine}} written"),
                (rate("rig_engine_hicache_storage_prefetched_tokens_total"),
                 "{{engine}} prefetched"),
            ),
            alerts=("RigHiCacheStorageMisses",),
            w=24,
        ),
    ])
    return rig_dashboard(
        "Rig: KV and HiCache",
        UIDS["hicache"],
        "KV pool usage and retractions; per-tier hit share of prompt tokens; L2 occupancy;"
        " eviction, load-back and backup between L1 and L2; L3 prefetch against writes.",
        [kv, hits, movement, storage],
    )


dashboard = build(Thresholds())

"""HiCache alerts: L1/L2 thrash, a full host pool, L3 storage misses."""

from __future__ import annotations

from alerts.rules.common import (
    CHURN_RATE,
    COUNT,
    ENGINE_SUBJECT,
    HOST_USAGE,
    PER_SECOND,
    PROMPT_RATE,
    Alert,
    dur,
    missing_hits,
    num,
    pct,
)
from exporter.schema import ENGINE_SERIES
from exporter.thresholds import Thresholds


def hicache_alerts(t: Thresholds) -> list[Alert]:
    recompute = dur(t.hicache_recompute_window_seconds)
    storage = dur(t.hicache_storage_window_seconds)
    long_prompt = str(t.hicache_recompute_tokens)
    pool = num(t.hicache_host_pool_ratio)
    churn = num(t.hicache_churn_tokens_per_second)
    l2_share = pct(t.hicache_l2_hit_ratio)
    w = dur(t.rate_window_seconds)
    l2_hits = f'sum without (tier) (rate(rig_engine_cache_hit_tokens_total{{tier="L2"}}[{w}]))'
    written = f"increase(rig_engine_hicache_storage_written_tokens_total[{storage}])"
    prefetched = f"increase(rig_engine_hicache_storage_prefetched_tokens_total[{storage}])"
    # SGLang creates the counter on its first prefetch: one born within the window has
    # prefetched its value, which increase() misses (one sample, or two alike).
    counter = "rig_engine_hicache_storage_prefetched_tokens_total"
    born = f"({counter} unless {counter} offset {storage})"
    return [
        Alert(
            "RigHiCacheThrash",
            "warning",
            # The host-capacity gauge exists only with HiCache on, so a rig
            # without L2 never matches.
            f"""
{CHURN_RATE} >= {num(t.hicache_churn_tokens_per_second)}
and on({ENGINE_SERIES})
({l2_hits} or {PROMPT_RATE} * 0) / on({ENGINE_SERIES}) ({PROMPT_RATE} > 0)
< {num(t.hicache_l2_hit_ratio)}
and on({ENGINE_SERIES})
rig_engine_hicache_host_capacity_tokens > 0
""",
            t.hicache_churn_for_seconds,
            f"Tokens have moved between L1 and L2 at {churn} tokens/s or more for"
            f" {dur(t.hicache_churn_for_seconds)} while L2 served under {l2_share} of prompts.",
            ENGINE_SUBJECT + " moves {{ $value | humanize }} tokens/s down to L2 and back up"
            f" (alert at {churn}) while L2 serves under {l2_share} of prompt tokens.",
            "How many long sessions are live against the L1 + L2 capacity (RUNBOOK table).",
            signal="churn",
            value_kind=PER_SECOND,
        ),
        Alert(
            "RigHiCacheThrash",
            "warning",
            # A long prompt that missed every tier after evictions, with L2
            # full: the session was evicted from L1 and then dropped from L2.
            f"""
{missing_hits(recompute)} >= {long_prompt}
and on({ENGINE_SERIES})
increase(rig_engine_hicache_evicted_tokens_total[{recompute}]) >= {long_prompt}
and on({ENGINE_SERIES})
{HOST_USAGE} >= {pool}
""",
            t.hicache_recompute_for_seconds,
            f"In the last {recompute}, {long_prompt} or more prompt tokens missed every cache"
            f" tier while L1 evicted into an L2 {pct(t.hicache_host_pool_ratio)} full.",
            ENGINE_SUBJECT
            + " recomputed " + COUNT + " prompt tokens in the last "
            + recompute
            + f" that no cache tier held (alert at {long_prompt}), while evicting from L1"
            " into a full L2.",
            "How many long sessions are live against the L1 + L2 capacity (RUNBOOK table).",
            signal="recompute",
        ),
        Alert(
            "RigHiCacheHostPoolFull",
            "warning",
            f"""
{HOST_USAGE} >= {pool}
and on({ENGINE_SERIES})
rate(rig_engine_hicache_evicted_tokens_total[{w}]) > 0
""",
            t.hicache_host_pool_for_seconds,
            f"The L2 host pool has been {pct(t.hicache_host_pool_ratio)} full or more for"
            f" {dur(t.hicache_host_pool_for_seconds)} while L1 keeps evicting into it.",
            ENGINE_SUBJECT + " has filled {{ $value | humanizePercentage }} of its L2 host pool"
            f" (alert at {pct(t.hicache_host_pool_ratio)}) and keeps evicting from L1.",
            "L2 occupancy against the live sessions; is RigHiCacheThrash firing too?",
        ),
        Alert(
            "RigHiCacheStorageMisses",
            "warning",
            # The storage counters exist only with an L3 backend configured. Only a
            # nearly full L2 drops sessions to L3 alone: with room in L2, prompts
            # that miss every tier are new ones (cold prefills), not lost sessions.
            f"""
{written} > 0
and on({ENGINE_SERIES})
({born} or {prefetched} or {written} * 0) == 0
and on({ENGINE_SERIES})
{missing_hits(storage)} >= {long_prompt}
and on({ENGINE_SERIES})
{HOST_USAGE} >= {num(t.hicache_storage_l2_ratio)}
""",
            t.hicache_storage_for_seconds,
            f"L3 storage was written in the last {storage} yet nothing was prefetched back"
            f" while {long_prompt} or more prompt tokens missed every tier and L2 was"
            f" {pct(t.hicache_storage_l2_ratio)} full or more.",
            ENGINE_SUBJECT
            + " wrote {{ $value | humanize }} tokens to L3 in the last "
            + storage
            + " yet prefetched none back while long prompts missed every tier.",
            "The SGLang version against the L3 hash-chain fix; the L3 directory keeps growing.",
        ),
    ]

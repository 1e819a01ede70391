"""HiCache checks, mirroring alerts/rules/hicache.py: L2 occupancy, L1<->L2 churn
(RigHiCacheThrash) and L3 misses. An engine without HiCache has no L2 capacity
gauge, so it has none of these checks (as the rules never match it)."""

from __future__ import annotations

from exporter.daemon.engines.source import EngineReading
from exporter.daemon.health.report import Signal, Stage
from exporter.daemon.health.view import Context, engine_labels, percent, seconds, signal


def hicache_signals(c: Context) -> list[Signal]:
    out: list[Signal] = []
    for config in c.engines:
        reading = c.view.engines.get(config.name)
        if reading is None:
            continue
        capacity = reading.metrics.values.get("hicache_host_capacity_tokens") or 0.0
        if capacity <= 0:
            continue
        labels = engine_labels(config)
        out += _occupancy(c, labels, reading, capacity)
        out += _churn(c, labels, reading)
        out += _recompute(c, labels, reading, capacity)
        out += _storage(c, labels, reading, capacity)
    return out


def _usage(reading: EngineReading, capacity: float) -> float:
    return (reading.metrics.values.get("hicache_host_used_tokens") or 0.0) / capacity


def _key(labels: dict[str, str], family: str) -> tuple[str, ...]:
    return ("engine", labels["engine"], family)


def _occupancy(c: Context, labels: dict[str, str], reading: EngineReading,
               capacity: float) -> list[Signal]:
    t, name = c.t, labels["engine"]
    usage = _usage(reading, capacity)
    window = t.rate_window_seconds
    holds: bool | None = False
    reason = f"{name}: L2 host pool {percent(usage)} full"
    if usage >= t.hicache_host_pool_ratio and "hicache_evicted_tokens_total" in \
            reading.metrics.values:
        if c.filled(window):
            evicting = c.history.rate(_key(labels, "hicache_evicted_tokens_total"), c.now, window)
            holds = evicting is not None and evicting > 0
            reason += f", L1 evicting {evicting or 0:.0f} tokens/s"
        else:
            holds, reason = None, f"{reason}; evictions: {c.not_filled(window)}"
    return [signal("hicache_l2_occupancy", labels, "RigHiCacheHostPoolFull",
                   (Stage("warning", t.hicache_host_pool_for_seconds),), holds, usage,
                   t.hicache_host_pool_ratio, "ratio", reason, sustained=True)]


def _churn(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    t, name, values = c.t, labels["engine"], reading.metrics.values
    stages = (Stage("warning", t.hicache_churn_for_seconds),)
    window = t.rate_window_seconds
    if "hicache_loaded_back_tokens_total" not in values:
        return [signal("hicache_churn", labels, "RigHiCacheThrash", stages, False, 0.0,
                       t.hicache_churn_tokens_per_second, "tokens/s",
                       f"{name}: nothing loaded back from L2 yet", "churn")]
    if not c.filled(window):
        return [signal("hicache_churn", labels, "RigHiCacheThrash", stages, None, None,
                       t.hicache_churn_tokens_per_second, "tokens/s",
                       f"{name}: {c.not_filled(window)}", "churn")]

    def rate(family: str) -> float | None:
        return c.history.rate(_key(labels, family), c.now, window)

    loaded, evicted = rate("hicache_loaded_back_tokens_total"), rate("hicache_evicted_tokens_total")
    # engine:rig_engine_hicache_churn_tokens:rate_window: the smaller of the two rates.
    churn = loaded if evicted is None or loaded is None else min(evicted, loaded)
    prompts = rate("prompt_tokens_total")
    l2_share = None
    if churn is not None and prompts is not None and prompts > 0:
        l2_share = (rate("cache_hit_tokens_total:L2") or 0.0) / prompts
    holds = (churn is not None and l2_share is not None
             and churn >= t.hicache_churn_tokens_per_second and l2_share < t.hicache_l2_hit_ratio)
    share = f"L2 serves {percent(l2_share)} of prompt tokens" if l2_share is not None \
        else "no prompt tokens"
    reason = (f"{name}: {churn or 0:.0f} tokens/s move down to L2 and back up; {share} "
              f"(thrash below {percent(t.hicache_l2_hit_ratio)})")
    return [signal("hicache_churn", labels, "RigHiCacheThrash", stages, holds, churn,
                   t.hicache_churn_tokens_per_second, "tokens/s", reason, "churn")]


def _missing_hits(c: Context, labels: dict[str, str], window: float) -> float | None:
    """Prompt tokens no tier served within the window (alerts.rules.common.missing_hits)."""
    prompts = c.history.increase(_key(labels, "prompt_tokens_total"), c.now, window)
    if prompts is None:
        return None
    hits = c.history.increase(_key(labels, "cache_hit_tokens_total"), c.now, window)
    return prompts - (hits or 0.0)


def _recompute(c: Context, labels: dict[str, str], reading: EngineReading,
               capacity: float) -> list[Signal]:
    t, name = c.t, labels["engine"]
    window, long_prompt = t.hicache_recompute_window_seconds, t.hicache_recompute_tokens
    stages = (Stage("warning", t.hicache_recompute_for_seconds),)
    if _usage(reading, capacity) < t.hicache_host_pool_ratio:
        return []  # the rule needs a full L2; the churn signal speaks for the check
    if not c.filled(window):
        return [signal("hicache_churn", labels, "RigHiCacheThrash", stages, None, None,
                       long_prompt, "tokens", f"{name}: L2 full; recomputed prompts: "
                       + c.not_filled(window), "recompute")]
    missing = _missing_hits(c, labels, window)
    evicted = c.history.increase(_key(labels, "hicache_evicted_tokens_total"), c.now, window)
    holds = (missing is not None and evicted is not None
             and missing >= long_prompt and evicted >= long_prompt)
    return [signal("hicache_churn", labels, "RigHiCacheThrash", stages, holds, missing,
                   long_prompt, "tokens",
                   f"{name}: {missing or 0:.0f} prompt tokens in the last {seconds(window)} "
                   f"hit no tier while L1 evicted {evicted or 0:.0f} into a full L2",
                   "recompute")]


def _storage(c: Context, labels: dict[str, str], reading: EngineReading,
             capacity: float) -> list[Signal]:
    t, name = c.t, labels["engine"]
    if "hicache_storage_written_tokens_total" not in reading.metrics.values:
        return []  # no L3 backend
    if _usage(reading, capacity) < t.hicache_storage_l2_ratio:
        return []  # L2 holds the sessions it dropped from L1: misses are new prompts
    window = t.hicache_storage_window_seconds
    stages = (Stage("warning", t.hicache_storage_for_seconds),)
    if not c.filled(window):
        return [signal("hicache_l3_misses", labels, "RigHiCacheStorageMisses", stages, None,
                       None, None, "tokens", f"{name}: {c.not_filled(window)}")]
    written = c.history.increase(_key(labels, "hicache_storage_written_tokens_total"), c.now,
                                 window) or 0.0
    prefetched = c.history.increase(
        _key(labels, "hicache_storage_prefetched_tokens_total"), c.now, window) or 0.0
    missing = _missing_hits(c, labels, window)
    holds = (written > 0 and prefetched == 0 and missing is not None
             and missing >= t.hicache_recompute_tokens)
    return [signal("hicache_l3_misses", labels, "RigHiCacheStorageMisses", stages, holds,
                   prefetched, None, "tokens",
                   f"{name}: in the last {seconds(window)} L3 took {written:.0f} tokens and "
                   f"gave back {prefetched:.0f}; {missing or 0:.0f} prompt tokens hit no tier")]

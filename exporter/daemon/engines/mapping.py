"""Which upstream family feeds each rig_engine_* family, per engine kind and version.

One table per engine kind. A rule lists its upstream families in order of preference;
the first one the engine exposes wins, which is how renames across versions are
mapped (docs/metrics.md#engine-metrics, docs/facts/sglang.md#families-by-release).
Names carry no prefix here: `sglang:` and `sglang_` (or `vllm:` / `vllm_`) are both
tried (docs/facts/sglang.md#names-and-prefixes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Upstream:
    """One upstream family and how to read it."""

    #: The name on its TYPE line without the prefix (counters keep `_total`).
    name: str
    #: label -> regular expression the label's value must match in full; a missing
    #: label reads as "".
    where: Mapping[str, str] = field(default_factory=dict)
    #: The label whose values name the cache tier, and (regex, tier) pairs for it.
    #: With no pairs, the label's own value is the rig label's (SGLang's `reason`,
    #: `category`), an empty one dropped.
    tier_label: str | None = None
    tiers: tuple[tuple[str, str], ...] = ()
    #: The tier of every sample, for families with no tier label.
    fixed_tier: str | None = None
    #: Take the value from this label instead of the sample (vLLM's info gauges).
    value_label: str | None = None
    #: What its TYPE line says where that is not what the value is: llama.cpp types
    #: `n_tokens_max`, a maximum, as a counter (docs/facts/llamacpp.md#metrics).
    declared_type: str | None = None


@dataclass(frozen=True)
class Rule:
    """One rig_engine_* family (named without `rig_engine_`)."""

    family: str
    type: str  # gauge | counter | histogram: what the upstream TYPE line must say
    sources: tuple[Upstream, ...]
    #: "sum" adds DP ranks (and streaming/non-streaming, tiers' sources, ...);
    #: "max" is for ratios, where a sum across ranks means nothing (docs/metrics.md#engine-metrics).
    combine: str = "sum"
    #: Written by every TP rank; without a `tp_rank` label the multiprocess registry
    #: has added the ranks up, so the value is divided by tp_size.
    per_tp_rank: bool = False
    #: No reading unless this rig family (this one or another) reads above 0: for
    #: values an engine writes as 0 when it has measured nothing.
    reading_if_positive: str | None = None
    #: Add up every source the engine exposes instead of taking the first: llama.cpp
    #: counts processed and cached prompt tokens in two families.
    add_sources: bool = False
    #: Each TP rank counts its own share (its own scheduler process, its own KV
    #: shard's bytes): the ranks add up instead of repeating one value.
    add_tp_ranks: bool = False
    #: The name of the rig label `tier_label` feeds.
    label: str = "tier"


@dataclass(frozen=True)
class EngineTable:
    kind: str
    prefixes: tuple[str, ...]
    rules: tuple[Rule, ...]
    #: The stall tracker's decode-progress counter and running-request gauge.
    decode_progress: Rule
    running: Rule

    def rule(self, family: str) -> Rule:
        return next(r for r in self.rules if r.family == family)


def _one(name: str, **kwargs: object) -> tuple[Upstream, ...]:
    return (Upstream(name, **kwargs),)  # type: ignore[arg-type]


# With --enable-priority-scheduling the total is under priority=""
# (docs/facts/sglang.md#running-gauge).
_TOTAL_PRIORITY = {"priority": ""}

# SGLang's own decode-batch counter: incremented once per decode batch
# (docs/facts/sglang.md#decode-pass-counter); prefill modes exist in newer versions and
# are not decode.
_SGLANG_DECODE_BATCHES = Rule(
    "decode_batches_total", "counter",
    _one("cuda_graph_passes_total", where={"mode": "decode_.*"}),
)
_SGLANG_RUNNING = Rule("running_requests", "gauge",
                       _one("num_running_reqs", where=_TOTAL_PRIORITY))

SGLANG = EngineTable(
    kind="sglang",
    prefixes=("sglang:", "sglang_"),
    rules=(
        _SGLANG_RUNNING,
        Rule("queued_requests", "gauge", _one("num_queue_reqs", where=_TOTAL_PRIORITY)),
        # kv_cache_usage_perc in the newest docs, token_usage before
        # (docs/facts/sglang.md#names-and-prefixes).
        # On hybrid (Mamba) models token_usage is max(full, mamba) (0.5.10
        # scheduler_metrics_mixin.py, 0.5.23 pool_stats_observer.py); full_token_usage
        # (0.5.10 on) is the KV pool alone, which is what RigKVPoolSaturated means.
        Rule("kv_usage_ratio", "gauge",
             (Upstream("kv_cache_usage_perc"), Upstream("full_token_usage"),
              Upstream("token_usage")), combine="max"),
        Rule("kv_capacity_tokens", "gauge", _one("max_total_num_tokens")),
        Rule("prompt_tokens_total", "counter", _one("prompt_tokens_total")),
        Rule("generation_tokens_total", "counter", _one("generation_tokens_total")),
        # Tokenizer-side hits of finished requests by tier
        # (docs/facts/sglang.md#cache-tiers). `total` is what SGLang writes when there
        # is no breakdown, i.e. HiCache off, where the GPU radix cache is the only tier:
        # L1. Versions before `cache_source` existed (no label, read as "") are counted
        # as L1 the same way. Without the family,
        # the scheduler's per-batch split (pre-seeded at 0 for every mode) is used.
        Rule("cache_hit_tokens_total", "counter", (
            Upstream("cached_tokens_total", tier_label="cache_source",
                     tiers=(("device|total|", "L1"), ("host", "L2"), ("storage.*", "L3"))),
            Upstream("prefill_effective_tokens_total", tier_label="mode",
                     tiers=(("device_hit", "L1"), ("host_hit", "L2"), ("storage_hit", "L3"))),
        )),
        Rule("hicache_host_used_tokens", "gauge", _one("hicache_host_used_tokens")),
        Rule("hicache_host_capacity_tokens", "gauge", _one("hicache_host_total_tokens")),
        # RadixCacheMetricsCollector: only `cache_type` (and extra) labels from 0.5.6 to
        # 0.5.20, a `tp_rank` from 0.5.21 (base_prefix_cache.py / metrics_collector.py,
        # read in the wheels): before, TP2 reads double.
        Rule("hicache_evicted_tokens_total", "counter", _one("evicted_tokens_total"),
             per_tp_rank=True),
        Rule("hicache_loaded_back_tokens_total", "counter", _one("load_back_tokens_total"),
             per_tp_rank=True),
        Rule("hicache_backed_up_tokens_total", "counter", _one("hicache_backup_tokens_total"),
             per_tp_rank=True),
        Rule("hicache_storage_prefetched_tokens_total", "counter",
             _one("prefetched_tokens_total")),
        Rule("hicache_storage_written_tokens_total", "counter", _one("backuped_tokens_total")),
        # 0.5.23's newer HiCache families (srt/observability/metrics_collector.py,
        # docs/metrics.md#engine-metrics). Tokens destroyed without a host
        # backup, by reason (host_pressure, write_through_unbacked_eviction): what
        # evicted_tokens_total less hicache_backup_tokens_total only estimates. The
        # pool label is always kv; every TP rank counts the same logical tokens.
        Rule("hicache_dropped_tokens_total", "counter",
             _one("hicache_dropped_tokens_total", tier_label="reason"), label="reason"),
        # Storage (L3) prefetch outcomes: hit tokens an L3 query returned, and those
        # that did not become a usable prefetch, by reason (deadline, host_capacity, ...).
        Rule("hicache_storage_prefetch_hit_tokens_total", "counter",
             _one("storage_prefetch_hit_tokens_total")),
        Rule("hicache_storage_prefetch_unfulfilled_tokens_total", "counter",
             _one("storage_prefetch_unfulfilled_tokens_total", tier_label="reason"),
             label="reason"),
        # Bytes moved between GPU and host (L2), all pools: each rank its own KV shard,
        # so the ranks add up; over the copies' seconds, the active bandwidth.
        Rule("hicache_backed_up_bytes_total", "counter", _one("hicache_backup_bytes_total"),
             add_tp_ranks=True),
        Rule("hicache_loaded_back_bytes_total", "counter", _one("load_back_bytes_total"),
             add_tp_ranks=True),
        Rule("hicache_backup_duration_seconds", "histogram",
             _one("hicache_backup_duration_seconds")),
        Rule("hicache_load_back_duration_seconds", "histogram",
             _one("load_back_duration_seconds")),
        Rule("retracted_requests_total", "counter", _one("num_retracted_requests_total")),
        # The scheduler's own time (0.5.23 metrics_reporter.py _record_scheduler_time,
        # flushed at most once a second, at loop events): CPU of its process, all
        # threads; wall time with no work; loop wall time by exclusive stage. Each TP
        # rank is a scheduler process of its own, so the ranks add up
        # (docs/metrics.md#the-schedulers-cpu).
        Rule("scheduler_cpu_seconds_total", "counter",
             _one("scheduler_process_cpu_seconds_total"), add_tp_ranks=True),
        Rule("scheduler_idle_seconds_total", "counter",
             _one("scheduler_idle_seconds_total"), add_tp_ranks=True),
        Rule("scheduler_stage_seconds_total", "counter",
             _one("scheduler_stage_seconds_total", tier_label="category"),
             add_tp_ranks=True, label="stage"),
        _SGLANG_DECODE_BATCHES,
        Rule("time_to_first_token_seconds", "histogram", _one("time_to_first_token_seconds")),
        # Renamed like vLLM's (docs/facts/sglang.md#names-and-prefixes).
        Rule("inter_token_latency_seconds", "histogram",
             (Upstream("inter_token_latency_seconds"),
              Upstream("time_per_output_token_seconds"))),
        # Speculative decoding, per decode log interval
        # (docs/facts/sglang.md#speculative-decoding): both gauges read 0 with it off and
        # before the first decode log, while a measured acceptance length is at least 1
        # (the bonus token), so a 0 length is no reading and neither is the rate beside it.
        Rule("spec_accept_length", "gauge", _one("spec_accept_length"), combine="max",
             reading_if_positive="spec_accept_length"),
        Rule("spec_accept_ratio", "gauge", _one("spec_accept_rate"), combine="max",
             reading_if_positive="spec_accept_length"),
    ),
    decode_progress=_SGLANG_DECODE_BATCHES,
    running=_SGLANG_RUNNING,
)

_VLLM_RUNNING = Rule("running_requests", "gauge", _one("num_requests_running"))
_VLLM_GENERATION = Rule("generation_tokens_total", "counter", _one("generation_tokens_total"))

VLLM = EngineTable(
    kind="vllm",
    prefixes=("vllm:", "vllm_"),
    rules=(
        _VLLM_RUNNING,
        Rule("queued_requests", "gauge", _one("num_requests_waiting")),
        # gpu_cache_usage_perc was deprecated in 0.9 for kv_cache_usage_perc
        # (docs/facts/sglang.md#vllm).
        Rule("kv_usage_ratio", "gauge",
             (Upstream("kv_cache_usage_perc"), Upstream("gpu_cache_usage_perc")),
             combine="max"),
        # The pool size is a label of the cache_config_info info gauge (vLLM 0.33).
        Rule("kv_capacity_tokens", "gauge",
             _one("cache_config_info", value_label="kv_cache_size_tokens")),
        Rule("prompt_tokens_total", "counter", _one("prompt_tokens_total")),
        _VLLM_GENERATION,
        # vLLM's KV offloading splits cached prompt tokens by where they came from;
        # older versions only count GPU prefix-cache hits (renamed from gpu_prefix_cache_*).
        Rule("cache_hit_tokens_total", "counter", (
            Upstream("prompt_tokens_cached_by_source_total", tier_label="source",
                     tiers=(("device", "L1"), ("host", "L2"), ("disk", "L3"))),
            Upstream("prefix_cache_hits_total", fixed_tier="L1"),
            Upstream("gpu_prefix_cache_hits_total", fixed_tier="L1"),
        )),
        Rule("retracted_requests_total", "counter", _one("num_preemptions_total")),
        Rule("time_to_first_token_seconds", "histogram", _one("time_to_first_token_seconds")),
        Rule("inter_token_latency_seconds", "histogram",
             (Upstream("inter_token_latency_seconds"),
              Upstream("time_per_output_token_seconds"))),
    ),
    # vLLM has no decode-batch counter. Its generation-token counter is updated on
    # every engine step (vllm/v1/metrics/loggers.py record()), so it moves whenever
    # decode does: the best progress signal it offers.
    decode_progress=_VLLM_GENERATION,
    running=_VLLM_RUNNING,
)

_LLAMACPP_RUNNING = Rule("running_requests", "gauge", _one("requests_processing"))
# llama_decode() calls: every batch, prefill chunks included, so not decode batches
# (docs/facts/llamacpp.md#metrics); the stall tracker reads /slots instead
# (docs/stall-tracker.md#llamacpp).
_LLAMACPP_DECODE_CALLS = Rule("decode_calls_total", "counter", _one("n_decode_total"))

LLAMACPP = EngineTable(
    kind="llamacpp",
    prefixes=("llamacpp:",),
    rules=(
        _LLAMACPP_RUNNING,
        # Requests no slot could take yet.
        Rule("queued_requests", "gauge", _one("requests_deferred")),
        # prompt_tokens_total leaves out the tokens reused from the cache, which
        # prompt_tokens_cached_total counts; rig_engine_prompt_tokens_total counts the
        # whole prompt, as SGLang and vLLM do. Both move only when a request finishes.
        Rule("prompt_tokens_total", "counter",
             (Upstream("prompt_tokens_total"), Upstream("prompt_tokens_cached_total")),
             add_sources=True),
        Rule("generation_tokens_total", "counter", _one("tokens_predicted_total")),
        # A slot's own KV cells: the only tier a llama-server has (its RAM prompt cache
        # restores into the slot before the count).
        Rule("cache_hit_tokens_total", "counter",
             _one("prompt_tokens_cached_total", fixed_tier="L1")),
        _LLAMACPP_DECODE_CALLS,
        Rule("max_sequence_tokens", "gauge", _one("n_tokens_max", declared_type="counter"),
             combine="max"),
        # Speculative decoding counters: 0 with it off, so no reading until a draft.
        Rule("spec_draft_tokens_total", "counter", _one("spec_decode_num_draft_tokens_total"),
             reading_if_positive="spec_draft_tokens_total"),
        Rule("spec_accepted_tokens_total", "counter",
             _one("spec_decode_num_accepted_tokens_total"),
             reading_if_positive="spec_draft_tokens_total"),
        Rule("spec_verify_steps_total", "counter", _one("spec_decode_num_drafts_total"),
             reading_if_positive="spec_draft_tokens_total"),
        # Not mapped: prompt_tokens_seconds and predicted_tokens_seconds are averages
        # since the previous /metrics request, whoever made it, so two scrapers skew
        # each other; rate() of the token counters is the rate
        # (docs/facts/llamacpp.md#metrics).
    ),
    # Progress and in-flight for llama.cpp come from /slots, not /metrics
    # (exporter/daemon/engines/stall/slots.py); these two are what /metrics offers.
    decode_progress=_LLAMACPP_DECODE_CALLS,
    running=_LLAMACPP_RUNNING,
)

TABLES = {table.kind: table for table in (SGLANG, VLLM, LLAMACPP)}

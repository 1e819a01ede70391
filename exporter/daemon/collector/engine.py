"""Engine and probe families from EngineReading and ProbeReading.

    rig_engine_info{engine="main",kind="sglang",version="0.5.23",model="Qwen3.8-27B-W4A16",...} 1.0
    rig_engine_running_requests{engine="main",kind="sglang"} 2.0
    rig_engine_cache_hit_tokens_total{engine="main",kind="sglang",tier="L2"} 29499.0
    rig_engine_decode_stall_tracker_up{engine="main",kind="sglang",cause=""} 1.0
    rig_engine_decode_stall_seconds{engine="main",kind="sglang"} 0.0
    rig_probe_success{engine="main",kind="sglang"} 1.0
    rig_probe_token_gap_seconds_bucket{engine="main",kind="sglang",le="0.05"} 31.0
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from exporter.daemon.collector.families import (
    PREFIX,
    counter,
    engine_label_values,
    families,
    gauge,
)
from exporter.daemon.engines.mapping import TABLES
from exporter.daemon.engines.probe import ProbeReading
from exporter.daemon.engines.slots import Slot
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.engines.stall.feed_stalls import FeedFigures
from exporter.daemon.engines.stall.tracker import StallState
from exporter.schema import ENGINE_LABELS

DOCS = {
    "running_requests": "Requests in the running (decoding) batch.",
    "queued_requests": "Requests waiting in the queue.",
    "kv_usage_ratio": "KV pool usage, 0-1 (the max over ranks).",
    "kv_capacity_tokens": "KV pool capacity in tokens (one per DP group; TP ranks not added).",
    "prompt_tokens_total": "Prompt tokens of finished requests.",
    "generation_tokens_total": "Generated tokens.",
    "cache_hit_tokens_total": "Prompt tokens served from cache, by tier: "
                              "L1 GPU, L2 host RAM, L3 storage.",
    "hicache_host_used_tokens": "Tokens held in the HiCache host (L2) pool.",
    "hicache_host_capacity_tokens": "Capacity of the HiCache host (L2) pool in tokens.",
    "hicache_evicted_tokens_total": "Device (L1) KV slots freed by eviction.",
    "hicache_loaded_back_tokens_total": "Tokens loaded back from host (L2) to GPU (L1).",
    "hicache_backed_up_tokens_total": "Tokens backed up from GPU (L1) to host (L2).",
    "hicache_storage_prefetched_tokens_total": "Tokens prefetched from storage (L3) to host.",
    "hicache_storage_written_tokens_total": "Tokens written from host (L2) to storage (L3).",
    "retracted_requests_total": "Requests retracted (preempted) to free KV space.",
    "hicache_dropped_tokens_total": "Device (L1) KV tokens destroyed without a host backup, "
                                    "by reason.",
    "hicache_storage_prefetch_hit_tokens_total": "Tokens a storage (L3) query found for a "
                                                 "prefetch.",
    "hicache_storage_prefetch_unfulfilled_tokens_total": "Storage (L3) hit tokens that did "
                                                         "not become a usable prefetch, by "
                                                         "reason.",
    "hicache_backed_up_bytes_total": "Bytes backed up from GPU (L1) to host (L2), all ranks.",
    "hicache_loaded_back_bytes_total": "Bytes loaded back from host (L2) to GPU (L1), all "
                                       "ranks.",
    "hicache_backup_duration_seconds": "Time of each GPU-to-host (L1 to L2) backup copy.",
    "hicache_load_back_duration_seconds": "GPU-stream time of each host-to-GPU (L2 to L1) "
                                          "load-back copy.",
    "scheduler_cpu_seconds_total": "CPU time of the scheduler processes, every thread, all "
                                   "TP ranks added (flushed at most once a second).",
    "scheduler_idle_seconds_total": "Wall time the schedulers had no work, all TP ranks added.",
    "scheduler_stage_seconds_total": "Scheduler loop wall time by exclusive stage (SGLang's "
                                     "category), all TP ranks added.",
    "decode_batches_total": "Decode batches run (forward passes in decode mode).",
    "decode_calls_total": "Forward passes (llama.cpp's llama_decode() calls): every batch, "
                          "prompt chunks included.",
    "max_sequence_tokens": "The longest sequence (prompt and generation) the engine has held "
                           "since it started.",
    "spec_draft_tokens_total": "Speculative decoding: draft tokens proposed; absent with it off.",
    "spec_accepted_tokens_total": "Speculative decoding: draft tokens the target model "
                                  "accepted; absent with it off.",
    "spec_verify_steps_total": "Speculative decoding: verification steps of the target model; "
                               "absent with it off.",
    "time_to_first_token_seconds": "Time to first token, as the engine measures it.",
    "inter_token_latency_seconds": "Inter-token latency, as the engine measures it; it "
                                   "spreads a stall over the tokens after it.",
    "spec_accept_length": "Speculative decoding: tokens accepted per decode step (accepted "
                          "drafts + the bonus token) over the engine's last decode log "
                          "interval; absent with it off.",
    "spec_accept_ratio": "Speculative decoding: the share of draft tokens accepted over the "
                         "engine's last decode log interval, 0-1; absent with it off.",
}


@families.register
def _(reading: EngineReading) -> Iterator[Metric]:
    ids = engine_label_values(reading)
    if reading.info is not None:
        info = reading.info
        names = list(info.labels())
        family = gauge("engine_info", "The engine's version, model and scheduling flags; "
                       "the value is always 1.", [*ENGINE_LABELS, *names])
        family.add_metric([*ids, *(getattr(info, n) for n in names)], 1.0)
        yield family
        if info.context_length_tokens is not None:
            length = gauge("engine_context_length_tokens",
                           "The engine's context length: the most tokens, prompt and answer, "
                           "one request may have.", ENGINE_LABELS)
            length.add_metric(ids, info.context_length_tokens)
            yield length
    rules = TABLES[reading.kind].rules
    metrics = reading.metrics
    for rule in rules:
        name, doc = f"engine_{rule.family}", DOCS[rule.family]
        if rule.family in metrics.values:
            family = (counter if rule.type == "counter" else gauge)(name, doc, ENGINE_LABELS)
            family.add_metric(ids, metrics.values[rule.family])
            yield family
        elif rule.family in metrics.tiers:
            family = counter(name, doc, [*ENGINE_LABELS, rule.label])
            for tier, value in metrics.tiers[rule.family].items():
                family.add_metric([*ids, tier], value)
            yield family
        elif rule.family in metrics.histograms:
            histogram = metrics.histograms[rule.family]
            family = HistogramMetricFamily(PREFIX + name, doc, labels=ENGINE_LABELS)
            family.add_metric(ids, list(histogram.buckets), histogram.sum)
            yield family
    if reading.slots is not None:
        yield from _slot_families(ids, reading.slots)
    if reading.stall_tracker is not None:
        status = reading.stall_tracker
        up = gauge("engine_decode_stall_tracker_up",
                   "1 while the stall tracker reads its counters; 0 while it cannot (the "
                   "stall series are then absent), `cause` saying why and /api/health "
                   "what it found.", [*ENGINE_LABELS, "cause"])
        up.add_metric([*ids, status.cause], 1.0 if status.up else 0.0)
        yield up
    if reading.stall is not None:
        yield from _stall_families(ids, reading.stall)
    if reading.stall_resolution_seconds is not None:
        resolution = gauge("engine_decode_stall_resolution_seconds",
                           "The stall tracker's poll interval in force (set by the "
                           "engine-cost budget when it reads /metrics; its floor while "
                           "decode stands still).", ENGINE_LABELS)
        resolution.add_metric(ids, reading.stall_resolution_seconds)
        yield resolution
    if reading.stall_plan is not None:
        plan = reading.stall_plan
        info = gauge("engine_decode_stall_plan_info",
                     "The signals the stall tracker reads, chosen from what the engine "
                     "exposes; the value is always 1.",
                     [*ENGINE_LABELS, "plan", "progress", "in_flight"])
        info.add_metric([*ids, plan.name, plan.progress, plan.in_flight], 1.0)
        yield info
    if reading.feed is not None and reading.stall is not None:
        yield from _feed_families(ids, reading.feed, reading.stall.window_seconds)


def _feed_families(ids: list[str], feed: FeedFigures, window_seconds: float) -> Iterable[Metric]:
    """SGLang's forward-pass feed, while it is the stall tracker's plan
    (docs/stall-tracker.md#the-forward-pass-feed)."""
    passes = counter("engine_decode_stall_feed_passes_total",
                     "Forward passes the scheduler's feed reported, by pass_kind: prefill, "
                     "decode, mixed (both), idle (heartbeats).",
                     [*ENGINE_LABELS, "pass_kind"])
    for kind, count in feed.passes.items():
        passes.add_metric([*ids, kind], count)
    dropped = counter("engine_decode_stall_feed_dropped_messages_total",
                      "Feed messages missing from its sequence numbers; the stall bounds "
                      "around each are widened.", ENGINE_LABELS)
    dropped.add_metric(ids, feed.dropped)
    window = f"{window_seconds:g} s"
    run = feed.longest_prefill_run
    seconds = gauge("engine_decode_stall_prefill_run_max_seconds",
                    f"Device time of the longest run of prefill-only passes in the last "
                    f"{window} (one under way included): decode held back that long at "
                    "least.", ENGINE_LABELS)
    seconds.add_metric(ids, run.seconds)
    count = gauge("engine_decode_stall_prefill_run_max_passes",
                  f"Passes in that run (the longest prefill-only run in the last {window}).",
                  ENGINE_LABELS)
    count.add_metric(ids, run.passes)
    yield from (passes, dropped, seconds, count)


def _slot_families(ids: list[str], slots: list[Slot]) -> Iterable[Metric]:
    """llama.cpp's slots (docs/metrics.md#llamacpp-slots)."""
    labels = [*ENGINE_LABELS, "slot"]
    context = gauge("engine_slot_context_tokens", "The most tokens, prompt and answer, a "
                    "request in this slot may have (llama.cpp).", labels)
    tokens = gauge("engine_slot_request_tokens", "Tokens of the request the slot is "
                   "processing, its prompt and what it has generated; 0 while idle "
                   "(llama.cpp).", labels)
    processing = gauge("engine_slot_processing", "1 while the slot processes a request "
                       "(llama.cpp).", labels)
    for slot in slots:
        values = [*ids, str(slot.id)]
        context.add_metric(values, slot.context_tokens)
        tokens.add_metric(values, slot.request_tokens)
        processing.add_metric(values, 1.0 if slot.processing else 0.0)
    yield from (context, tokens, processing)


def _stall_families(ids: list[str], stall: StallState) -> Iterable[Metric]:
    window = f"{stall.window_seconds:g} s"
    for name, doc, value in (
        ("engine_decode_stall_seconds", "Length of the decode stall under way (requests "
         "running, no decode progress), at least; 0 while decoding.", stall.current_seconds),
        ("engine_decode_stall_upper_seconds", "Length of the decode stall under way, at "
         "most (one poll more at its start).", stall.current_upper_seconds),
        ("engine_decode_stall_max_seconds", f"Longest decode stall in the last {window}, "
         "at least.", stall.max_recent_seconds),
        ("engine_decode_stall_max_upper_seconds", f"Longest decode stall in the last "
         f"{window}, at most.", stall.max_recent_upper_seconds),
    ):
        family = gauge(name, doc, ENGINE_LABELS)
        family.add_metric(ids, value)
        yield family
    if stall.max_recent_blind_seconds is not None:
        blind = gauge("engine_decode_stall_max_blind_seconds", "Longest span in the last "
                      f"{window} from one stall-tracker reading's ask to the next one's "
                      "answer: a stall shorter than it could have passed unseen.",
                      ENGINE_LABELS)
        blind.add_metric(ids, stall.max_recent_blind_seconds)
        yield blind
    total = counter("engine_decode_stalled_seconds_total",
                    "Time spent in decode stalls since the exporter started (the lower "
                    "bounds added up).", ENGINE_LABELS)
    total.add_metric(ids, stall.total_seconds)
    yield total


@families.register
def _(reading: ProbeReading) -> Iterator[Metric]:
    last = reading.last
    if last is None:
        return  # no probe has finished yet
    ids = engine_label_values(reading)
    success = gauge("probe_success", "1 if the last stream probe finished in time.", ENGINE_LABELS)
    success.add_metric(ids, 1.0 if last.success else 0.0)
    yield success
    for name, doc, value in (
        ("probe_ttft_seconds", "Last probe: time to the first token.", last.ttft_seconds),
        ("probe_max_token_gap_seconds", "Last probe: longest gap between frames "
         "(on a timeout, including the gap still open).", last.max_gap_seconds),
        ("probe_decode_tokens_per_second", "Last probe: tokens after the first frame "
         "over the time they took.", last.decode_tokens_per_second),
    ):
        if value is not None:
            family = gauge(name, doc, ENGINE_LABELS)
            family.add_metric(ids, value)
            yield family
    gaps = HistogramMetricFamily(PREFIX + "probe_token_gap_seconds",
                                 "Every gap between token-bearing stream frames, all probes.",
                                 labels=ENGINE_LABELS)
    gaps.add_metric(ids, list(reading.gap_buckets), reading.gap_sum)
    yield gaps

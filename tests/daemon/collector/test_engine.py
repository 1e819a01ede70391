"""Engine and probe families: `engine` is the instance's name, `kind` the software."""

from __future__ import annotations

import dataclasses

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.daemon.engines.info import EngineInfo
from exporter.daemon.engines.normalise import EngineMetrics, HistogramValue
from exporter.daemon.engines.probe import ProbeReading, ProbeResult
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.engines.stall.plans import HTTP_IN_FLIGHT
from exporter.daemon.engines.stall.tracker import StallState
from exporter.streams.histogram import Histogram
from tests.daemon.collector.registry import answered, collected, sample_names

MAIN = {"engine": "main", "kind": "sglang"}
TTFT = HistogramValue(buckets=(("0.5", 3.0), ("1.0", 5.0), ("+Inf", 6.0)), sum=4.25)


def sglang(name: str = "main", **values: float) -> EngineReading:
    metrics = EngineMetrics(
        values={"running_requests": 2.0, "queued_requests": 1.0, "kv_usage_ratio": 0.42,
                "prompt_tokens_total": 65536.0, "decode_batches_total": 1200.0, **values},
        tiers={"cache_hit_tokens_total": {"L1": 1000.0, "L2": 29499.0}},
        histograms={"time_to_first_token_seconds": TTFT},
    )
    info = EngineInfo(version="0.5.23", model="Qwen3.8-27B-W4A16", tp_size="2", hicache="true")
    stall = StallState(3.5, 47.2, 120.0, 4.0, 48.9)
    return EngineReading("sglang", name, metrics, info, stall, 0.25, HTTP_IN_FLIGHT)


def test_gauges_and_counters_carry_the_engine_name_and_kind() -> None:
    registry = collected(answered("engine/main", sglang()))
    assert registry.get_sample_value("rig_engine_running_requests", MAIN) == 2.0
    assert registry.get_sample_value("rig_engine_queued_requests", MAIN) == 1.0
    assert registry.get_sample_value("rig_engine_kv_usage_ratio", MAIN) == 0.42
    assert registry.get_sample_value("rig_engine_prompt_tokens_total", MAIN) == 65536.0
    assert registry.get_sample_value("rig_engine_decode_batches_total", MAIN) == 1200.0


def test_the_old_label_pair_is_gone() -> None:
    registry = collected(answered("engine/main", sglang()))
    old = {"engine": "sglang", "name": "main"}
    assert registry.get_sample_value("rig_engine_running_requests", old) is None
    for family in registry.collect():
        for sample in family.samples:
            assert "name" not in sample.labels, sample


def test_tiers_histograms_and_stall_families() -> None:
    registry = collected(answered("engine/main", sglang()))
    hits = "rig_engine_cache_hit_tokens_total"
    assert registry.get_sample_value(hits, {**MAIN, "tier": "L2"}) == 29499.0
    assert registry.get_sample_value(hits, {**MAIN, "tier": "L1"}) == 1000.0
    assert registry.get_sample_value(hits, {**MAIN, "tier": "L3"}) is None
    ttft = "rig_engine_time_to_first_token_seconds"
    assert registry.get_sample_value(ttft + "_bucket", {**MAIN, "le": "1.0"}) == 5.0
    assert registry.get_sample_value(ttft + "_count", MAIN) == 6.0
    assert registry.get_sample_value(ttft + "_sum", MAIN) == 4.25
    assert registry.get_sample_value("rig_engine_decode_stall_seconds", MAIN) == 3.5
    assert registry.get_sample_value("rig_engine_decode_stall_max_seconds", MAIN) == 47.2
    assert registry.get_sample_value("rig_engine_decode_stalled_seconds_total", MAIN) == 120.0
    assert registry.get_sample_value("rig_engine_decode_stall_resolution_seconds", MAIN) == 0.25
    assert registry.get_sample_value("rig_engine_decode_stall_upper_seconds", MAIN) == 4.0
    assert registry.get_sample_value("rig_engine_decode_stall_max_upper_seconds", MAIN) == 48.9
    plan = {**MAIN, "plan": "http_in_flight", "progress": "decode_passes+streamed_tokens",
            "in_flight": "running_while_http_active"}
    assert registry.get_sample_value("rig_engine_decode_stall_plan_info", plan) == 1.0


def test_info_carries_the_server_flags_beside_the_engine_labels() -> None:
    registry = collected(answered("engine/main", sglang()))
    labels = {**MAIN, "version": "0.5.23", "model": "Qwen3.8-27B-W4A16", "tp_size": "2",
              "hicache": "true", "hicache_storage": "", "mixed_chunk": "",
              "chunked_prefill_size": "", "schedule_policy": "", "speculative": "",
              "decode_log_interval": ""}
    assert registry.get_sample_value("rig_engine_info", labels) == 1.0


def test_families_the_engine_lacks_are_absent_not_zero() -> None:
    bare = EngineReading("vllm", "side", EngineMetrics(values={"running_requests": 0.0}),
                         None, None)
    registry = collected(answered("engine/side", bare))
    side = {"engine": "side", "kind": "vllm"}
    assert registry.get_sample_value("rig_engine_running_requests", side) == 0.0
    engine_families = {n for n in sample_names(registry) if n.startswith("rig_engine_")}
    assert engine_families == {"rig_engine_running_requests"}


def test_two_engines_share_each_family_in_one_valid_exposition() -> None:
    registry = collected(answered("engine/main", sglang()),
                         answered("engine/side", sglang("side", running_requests=5.0)))
    assert registry.get_sample_value("rig_engine_running_requests", MAIN) == 2.0
    side = {"engine": "side", "kind": "sglang"}
    assert registry.get_sample_value("rig_engine_running_requests", side) == 5.0
    # Prometheus rejects a scrape that names a family twice.
    names = [f.name for f in text_string_to_metric_families(generate_latest(registry).decode())]
    assert len(names) == len(set(names))


def probe(result: ProbeResult | None) -> ProbeReading:
    gaps = Histogram()
    for gap in result.gaps_seconds if result else ():
        gaps.observe(gap)
    return ProbeReading("sglang", "main", result, tuple(gaps.buckets()), gaps.sum)


def test_probe_families_after_a_finished_probe() -> None:
    result = ProbeResult(success=True, reason="", ttft_seconds=0.12, gaps_seconds=(0.03, 0.05),
                         max_gap_seconds=0.05, tokens=32, decode_tokens_per_second=31.5)
    reading = probe(result)
    registry = collected(answered("probe/main", reading))
    assert registry.get_sample_value("rig_probe_success", MAIN) == 1.0
    assert registry.get_sample_value("rig_probe_ttft_seconds", MAIN) == 0.12
    assert registry.get_sample_value("rig_probe_max_token_gap_seconds", MAIN) == 0.05
    assert registry.get_sample_value("rig_probe_decode_tokens_per_second", MAIN) == 31.5
    gaps = "rig_probe_token_gap_seconds"
    assert registry.get_sample_value(gaps + "_bucket", {**MAIN, "le": "0.025"}) == 0.0
    assert registry.get_sample_value(gaps + "_bucket", {**MAIN, "le": "0.05"}) == 2.0
    assert registry.get_sample_value(gaps + "_count", MAIN) == 2.0
    assert registry.get_sample_value(gaps + "_sum", MAIN) == 0.08


def test_a_failed_probe_reads_zero_and_leaves_out_what_it_did_not_measure() -> None:
    result = ProbeResult(success=False, reason="no first token within 60 s", ttft_seconds=None,
                         gaps_seconds=(), max_gap_seconds=None, tokens=0,
                         decode_tokens_per_second=None)
    registry = collected(answered("probe/main", probe(result)))
    assert registry.get_sample_value("rig_probe_success", MAIN) == 0.0
    assert registry.get_sample_value("rig_probe_max_token_gap_seconds", MAIN) is None
    assert registry.get_sample_value("rig_probe_ttft_seconds", MAIN) is None
    assert registry.get_sample_value("rig_probe_decode_tokens_per_second", MAIN) is None


def test_no_probe_family_before_the_first_probe_finishes() -> None:
    registry = collected(answered("probe/main", probe(None)))
    assert not {n for n in sample_names(registry) if n.startswith("rig_probe_")}
    assert registry.get_sample_value("rig_source_up", {"source": "probe/main"}) == 1.0


def test_the_stall_maximum_says_the_window_in_force() -> None:
    compressed = dataclasses.replace(
        sglang(), stall=StallState(0.0, 2.0, 5.0, 0.0, 2.25, window_seconds=6.0))
    help_text = {f.name: f.documentation for f in collected(
        answered("engine/main", compressed)).collect()}
    assert help_text["rig_engine_decode_stall_max_seconds"] == (
        "Longest decode stall in the last 6 s, at least.")

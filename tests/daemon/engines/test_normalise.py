"""rig_engine_* values each genuine exposition implies.

Every expected value is computed here from the fixture through prometheus_client's
parser (an independent path), following the rules of docs/metrics.md#engine-metrics:
max over tp_rank within a DP group, sum across dp_rank and is_streaming, max for ratios.
"""

from __future__ import annotations

import pytest

from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.mapping import SGLANG, TABLES, VLLM
from exporter.daemon.engines.normalise import normalise, wanted_names
from tests.daemon.engines.helpers import SGLANG_MULTIPROC, SGLANG_SINGLE, reference_samples
from tests.daemon.engines.helpers import VLLM as VLLM_FIXTURE


def normalised(text: str, kind: str):
    table = TABLES[kind]
    return normalise(parse(text, wanted_names(table, table.rules)), table)


def total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples with these labels (over is_streaming, dp ranks, ...)."""
    return sum(s.value for s in reference_samples(text, name)
               if all(s.labels.get(k) == v for k, v in labels.items()))


def per_tp_max(text: str, name: str) -> float:
    """Max over tp_rank within each dp_rank (a missing dp_rank is one group), summed."""
    groups: dict[str, float] = {}
    for s in reference_samples(text, name):
        dp = s.labels.get("dp_rank", "")
        groups[dp] = max(groups.get(dp, 0.0), s.value)
    return sum(groups.values())


@pytest.mark.parametrize("path", [SGLANG_SINGLE, SGLANG_MULTIPROC], ids=["single", "multiproc-b"])
class TestSglangFixtures:
    def test_requests_and_kv(self, path):
        text = path.read_text()
        m = normalised(text, "sglang")
        # Scheduler gauges: only TP rank 0 exports them (docs/facts/sglang.md#multiprocess-mode).
        assert m.values["running_requests"] == per_tp_max(text, "sglang:num_running_reqs")
        assert m.values["queued_requests"] == per_tp_max(text, "sglang:num_queue_reqs")
        assert m.values["kv_usage_ratio"] == max(
            s.value for s in reference_samples(text, "sglang:full_token_usage"))
        # Capacity repeats on both TP ranks of fixture b: one value, never doubled.
        assert m.values["kv_capacity_tokens"] == per_tp_max(text, "sglang:max_total_num_tokens")

    def test_tokens_sum_is_streaming(self, path):
        text = path.read_text()
        m = normalised(text, "sglang")
        assert m.values["prompt_tokens_total"] == total(text, "sglang:prompt_tokens_total")
        assert m.values["generation_tokens_total"] == total(
            text, "sglang:generation_tokens_total")

    def test_cache_hit_tiers(self, path):
        text = path.read_text()
        m = normalised(text, "sglang")
        # L1 = device, L2 = host, L3 = storage* of cached_tokens_total, each summed
        # over is_streaming; a tier the fixture never touched stays absent.
        expected = {}
        for tier, source in (("L1", "device"), ("L2", "host"), ("L3", "storage")):
            samples = [s for s in reference_samples(text, "sglang:cached_tokens_total")
                       if s.labels["cache_source"].startswith(source)]
            if samples:
                expected[tier] = sum(s.value for s in samples)
        assert m.tiers["cache_hit_tokens_total"] == expected

    def test_hicache_counters_take_one_tp_rank(self, path):
        text = path.read_text()
        m = normalised(text, "sglang")
        for family, upstream in (
            ("hicache_evicted_tokens_total", "sglang:evicted_tokens_total"),
            ("hicache_loaded_back_tokens_total", "sglang:load_back_tokens_total"),
            ("hicache_backed_up_tokens_total", "sglang:hicache_backup_tokens_total"),
            ("hicache_host_used_tokens", "sglang:hicache_host_used_tokens"),
            ("hicache_host_capacity_tokens", "sglang:hicache_host_total_tokens"),
        ):
            assert m.values[family] == per_tp_max(text, upstream), family

    def test_decode_batches_are_decode_modes_only(self, path):
        text = path.read_text()
        m = normalised(text, "sglang")
        decode = [s for s in reference_samples(text, "sglang:cuda_graph_passes_total")
                  if s.labels["mode"].startswith("decode_")]
        by_rank: dict[str, float] = {}
        for s in decode:  # modes add up within a rank; ranks repeat the count
            by_rank[s.labels["tp_rank"]] = by_rank.get(s.labels["tp_rank"], 0.0) + s.value
        assert m.values["decode_batches_total"] == max(by_rank.values())

    def test_histograms_pass_through_buckets(self, path):
        text = path.read_text()
        m = normalised(text, "sglang")
        ttft = m.histograms["time_to_first_token_seconds"]
        inf = total(text, "sglang:time_to_first_token_seconds_bucket", le="+Inf")
        assert ttft.buckets[-1] == ("+Inf", inf)
        assert ttft.sum == pytest.approx(total(text, "sglang:time_to_first_token_seconds_sum"))
        bounds = {s.labels["le"] for s in
                  reference_samples(text, "sglang:time_to_first_token_seconds_bucket")}
        assert [le for le, _ in ttft.buckets] == sorted(bounds, key=float)
        assert "inter_token_latency_seconds" in m.histograms


def test_multiproc_b_storage_families_absent():
    # Fixture b runs HiCache without an L3 backend: no storage families upstream.
    m = normalised(SGLANG_MULTIPROC.read_text(), "sglang")
    assert "hicache_storage_prefetched_tokens_total" not in m.values
    assert "L3" not in m.tiers["cache_hit_tokens_total"]
    assert m.values["retracted_requests_total"] == per_tp_max(
        SGLANG_MULTIPROC.read_text(), "sglang:num_retracted_requests_total")


def test_single_storage_families():
    text = SGLANG_SINGLE.read_text()
    m = normalised(text, "sglang")
    assert m.values["hicache_storage_prefetched_tokens_total"] == total(
        text, "sglang:prefetched_tokens_total")
    assert m.values["hicache_storage_written_tokens_total"] == total(
        text, "sglang:backuped_tokens_total")
    # Declared but never incremented in this capture: HELP/TYPE only, so absent.
    assert "retracted_requests_total" not in m.values


def test_vllm_fixture():
    text = VLLM_FIXTURE.read_text()
    m = normalised(text, "vllm")
    assert m.values["running_requests"] == total(text, "vllm:num_requests_running")
    assert m.values["queued_requests"] == total(text, "vllm:num_requests_waiting")
    assert m.values["kv_usage_ratio"] == max(
        s.value for s in reference_samples(text, "vllm:kv_cache_usage_perc"))
    info = reference_samples(text, "vllm:cache_config_info")[0].labels
    assert m.values["kv_capacity_tokens"] == float(info["kv_cache_size_tokens"])
    assert m.values["retracted_requests_total"] == total(text, "vllm:num_preemptions_total")
    assert m.values["generation_tokens_total"] == total(text, "vllm:generation_tokens_total")
    by_source = {s.labels["source"]: s.value for s in
                 reference_samples(text, "vllm:prompt_tokens_cached_by_source_total")}
    assert m.tiers["cache_hit_tokens_total"] == {
        "L1": by_source["device"], "L2": by_source["host"], "L3": by_source["disk"]}
    assert "decode_batches_total" not in m.values  # vLLM has no decode-batch counter
    assert m.histograms["inter_token_latency_seconds"].buckets[-1] == (
        "+Inf", total(text, "vllm:inter_token_latency_seconds_bucket", le="+Inf"))


RANKS = """\
# TYPE sglang_max_total_num_tokens gauge
sglang_max_total_num_tokens{dp_rank="0",tp_rank="0"} 1000.0
sglang_max_total_num_tokens{dp_rank="0",tp_rank="1"} 1000.0
sglang_max_total_num_tokens{dp_rank="1",tp_rank="0"} 900.0
sglang_max_total_num_tokens{dp_rank="1",tp_rank="1"} 900.0
# TYPE sglang_token_usage gauge
sglang_token_usage{dp_rank="0",tp_rank="0"} 0.4
sglang_token_usage{dp_rank="1",tp_rank="0"} 0.7
# TYPE sglang_num_running_reqs gauge
sglang_num_running_reqs{dp_rank="0",priority="",tp_rank="0"} 3.0
sglang_num_running_reqs{dp_rank="0",priority="1",tp_rank="0"} 2.0
sglang_num_running_reqs{dp_rank="1",priority="",tp_rank="0"} 4.0
# TYPE sglang_num_retracted_requests_total counter
sglang_num_retracted_requests_total{pid="11",tp_rank="0"} 5.0
sglang_num_retracted_requests_total{pid="12",tp_rank="1"} 5.0
# TYPE sglang_cached_tokens_total counter
sglang_cached_tokens_total{cache_source="total",is_streaming="true"} 70.0
sglang_cached_tokens_total{cache_source="total",is_streaming="false"} 5.0
# TYPE sglang_gpu_execution_seconds_total counter
# TYPE sglang_num_queue_reqs counter
sglang_num_queue_reqs 3.0
"""


class TestRankRules:
    """Underscore prefix, DP sum, TP max, ratio max, priority total, pid, `total`."""

    def test_rules(self):
        m = normalised(RANKS, "sglang")
        assert m.values["kv_capacity_tokens"] == 1000 + 900
        assert m.values["kv_usage_ratio"] == 0.7
        assert m.values["running_requests"] == 3 + 4  # priority="" is the total
        assert m.values["retracted_requests_total"] == 5
        assert m.tiers["cache_hit_tokens_total"] == {"L1": 75.0}

    def test_type_read_from_type_line(self):
        m = normalised(RANKS, "sglang")
        assert "queued_requests" not in m.values
        assert any("sglang_num_queue_reqs is a counter" in p for p in m.problems)

    def test_tables_cover_every_documented_family(self):
        families = {r.family for r in SGLANG.rules}
        assert {"running_requests", "cache_hit_tokens_total", "decode_batches_total",
                "inter_token_latency_seconds"} <= families
        assert {r.family for r in VLLM.rules} <= families

"""The parser, the mapping and the tracker's counters on bodies rendered by each
release's own metrics code (tests/fixtures/engine/releases/README.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.mapping import SGLANG
from exporter.daemon.engines.normalise import normalise, wanted_names
from exporter.daemon.engines.stall.evidence import Evidence
from exporter.daemon.engines.stall.plans import choose
from exporter.daemon.engines.stall.progress import ProgressView
from exporter.daemon.engines.stall.readers import MetricsBody, MetricsReader

RELEASES = Path(__file__).parents[2] / "fixtures" / "engine" / "releases"


def body(version: str) -> str:
    return (RELEASES / f"sglang-{version}-metrics-multiproc.txt").read_text()


def counters(version: str):
    async def fetch() -> str:
        return body(version)

    return asyncio.run(MetricsReader(MetricsBody(fetch), 0.25).read()).counters


@pytest.mark.parametrize("version", ["0.5.5", "0.5.10", "0.5.16"])
def test_tracker_counters(version):
    c = counters(version)
    # Written by the release's own observe_inter_token_latency: 5 outputs of 3 tokens.
    assert c.streamed_tokens == 15.0
    assert c.running == 2.0  # both TP ranks say 2: one value, never 4
    assert c.finished == 1.0
    if version == "0.5.5":
        assert c.decode_passes is None  # the family does not exist before 0.5.7
    else:
        assert c.decode_passes == 4096.0  # decode modes only, max over TP ranks
    plan = choose(Evidence(version, families=c.families)).plan
    assert plan is not None
    progress = ProgressView(plan).progress(c, 0.0)
    assert progress.decode == 15.0 + (c.decode_passes or 0.0)


@pytest.mark.parametrize(("version", "kv"), [("0.5.5", 0.9), ("0.5.10", 0.62),
                                             ("0.5.16", 0.62)])
def test_kv_usage_is_the_kv_pool_where_full_token_usage_exists(version, kv):
    metrics = normalise(parse(body(version), wanted_names(SGLANG, SGLANG.rules)), SGLANG)
    assert metrics.values["kv_usage_ratio"] == kv


@pytest.mark.parametrize("version", ["0.5.10", "0.5.16"])
def test_rankless_hicache_counters_are_divided_by_tp_size(version):
    text = body(version)
    assert 'sglang:evicted_tokens_total{cache_type="HiRadixCache"} 131072.0' in text
    exposition = parse(text, wanted_names(SGLANG, SGLANG.rules))
    # Each TP rank evicted 65,536 tokens of the same logical cache.
    assert normalise(exposition, SGLANG, tp_size=2).values[
        "hicache_evicted_tokens_total"] == 65536.0
    assert normalise(exposition, SGLANG, tp_size=2).values[
        "hicache_loaded_back_tokens_total"] == 32768.0


def test_ranked_hicache_counters_are_not_divided():
    multiproc_b = (RELEASES.parent / "sglang-0.5.23-metrics-multiproc-b.txt").read_text()
    exposition = parse(multiproc_b, wanted_names(SGLANG, SGLANG.rules))
    # 0.5.23 labels them by tp_rank; README-b: 314,875 evicted per rank.
    assert normalise(exposition, SGLANG, tp_size=2).values[
        "hicache_evicted_tokens_total"] == 314875.0

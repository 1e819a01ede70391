"""The simulated SGLang's scheduler-time and newer HiCache families, as the exporter
maps them (exporter/daemon/engines/mapping.py): plausible values, moved by the load."""

from __future__ import annotations

import pytest

from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.mapping import SGLANG
from exporter.daemon.engines.normalise import normalise, wanted_names
from exporter.sim.engine.server import load_template, render_metrics
from exporter.sim.engine.state import KV_BYTES_PER_TOKEN_PER_RANK, SimEngine

TEMPLATE = load_template()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def mapped(state: SimEngine):  # noqa: ANN201
    text = render_metrics(state, TEMPLATE)
    return normalise(parse(text, wanted_names(SGLANG, SGLANG.rules)), SGLANG, state.tp_size)


def run(state: SimEngine, clock: Clock, seconds: float, step: float = 0.1) -> None:
    for _ in range(round(seconds / step)):
        clock.now += step
        state.advance()


def test_a_busy_scheduler_gets_about_a_core_per_tp_rank_and_an_idle_one_idles():
    clock = Clock()
    state = SimEngine(clock=clock)  # TP 2: two scheduler processes
    start = mapped(state)
    assert start.values["scheduler_cpu_seconds_total"] == 0.0  # created at 0, as SGLang does
    state.running = 2
    run(state, clock, 10.0)
    busy = mapped(state)
    cpu = busy.values["scheduler_cpu_seconds_total"]
    stages = busy.tiers["scheduler_stage_seconds_total"]
    idle = busy.values["scheduler_idle_seconds_total"]
    assert idle == 0.0
    # Two ranks, each ~10 busy seconds, flushed once a second.
    assert 18.0 <= sum(stages.values()) <= 20.0
    assert cpu / (sum(stages.values()) - idle) == pytest.approx(0.97)
    assert max(stages, key=lambda k: stages[k]) == "run_batch"
    state.running = 0
    run(state, clock, 5.0)
    rested = mapped(state)
    assert rested.values["scheduler_idle_seconds_total"] >= 8.0
    assert rested.tiers["scheduler_stage_seconds_total"]["idle"] == \
        rested.values["scheduler_idle_seconds_total"]


def test_a_starved_scheduler_shows_less_than_a_core_per_busy_second():
    clock = Clock()
    state = SimEngine(clock=clock, scheduler_cpu_share=0.3)
    state.running = 1
    run(state, clock, 6.0)
    metrics = mapped(state)
    busy = sum(metrics.tiers["scheduler_stage_seconds_total"].values()) - \
        metrics.values["scheduler_idle_seconds_total"]
    assert metrics.values["scheduler_cpu_seconds_total"] / busy == pytest.approx(0.3)


def test_the_counters_move_at_most_once_a_second():
    clock = Clock()
    state = SimEngine(clock=clock)
    state.running = 1
    run(state, clock, 1.05, step=0.05)
    first = mapped(state).values["scheduler_cpu_seconds_total"]
    run(state, clock, 0.5, step=0.05)
    assert mapped(state).values["scheduler_cpu_seconds_total"] == first


def test_hicache_traffic_moves_bytes_copies_and_prefetch_outcomes():
    clock = Clock()
    state = SimEngine(clock=clock, hicache_host_used_tokens=0,
                      hicache_host_total_tokens=319_193, hicache_storage="file",
                      max_total_num_tokens=1_000_000)
    state.submit(20_000, 4, cached={"device": 0, "host": 8192, "storage": 4096})
    run(state, clock, 30.0, step=0.5)
    state.prefetch_unfulfilled_tokens = {"deadline": 512.0}
    state.dropped_tokens = {"host_pressure": 64.0}
    metrics = mapped(state)
    v, tiers = metrics.values, metrics.tiers
    # Each TP rank copies its own shard: the bytes add up over the two ranks.
    assert v["hicache_loaded_back_bytes_total"] == \
        2 * v["hicache_loaded_back_tokens_total"] * KV_BYTES_PER_TOKEN_PER_RANK
    assert v["hicache_backed_up_bytes_total"] == \
        2 * v["hicache_backed_up_tokens_total"] * KV_BYTES_PER_TOKEN_PER_RANK
    assert metrics.histograms["hicache_load_back_duration_seconds"].sum > 0
    assert metrics.histograms["hicache_backup_duration_seconds"].sum > 0
    assert v["hicache_storage_prefetch_hit_tokens_total"] == \
        v["hicache_storage_prefetched_tokens_total"] + 512.0
    assert tiers["hicache_storage_prefetch_unfulfilled_tokens_total"]["deadline"] == 512.0
    assert tiers["hicache_storage_prefetch_unfulfilled_tokens_total"]["host_capacity"] == 0.0
    # A logical count: every TP rank repeats it, so it is not doubled.
    assert tiers["hicache_dropped_tokens_total"] == {
        "host_pressure": 64.0, "write_through_unbacked_eviction": 0.0}


def test_without_hicache_its_newer_families_are_absent():
    metrics = mapped(SimEngine(clock=Clock()))
    for family in ("hicache_dropped_tokens_total", "hicache_loaded_back_bytes_total",
                   "hicache_backed_up_bytes_total",
                   "hicache_storage_prefetch_hit_tokens_total"):
        assert family not in metrics.values and family not in metrics.tiers
    assert "hicache_load_back_duration_seconds" not in metrics.histograms

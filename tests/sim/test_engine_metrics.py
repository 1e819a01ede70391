"""Scheduled requests move /metrics the way SGLang 0.5.23 moves it per batch kind.

Everything runs on a fake clock: the engine's scheduler advances when the clock is
read, so a 50 s prefill costs nothing.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.engine.scheduler import Policy
from exporter.sim.engine.server import load_template, render_metrics
from exporter.sim.engine.state import SimEngine

TEMPLATE = load_template()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scrape(state: SimEngine) -> dict[tuple[str, tuple], float]:
    """Every sample, keyed by name and its labels other than the rank labels."""
    samples: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(render_metrics(state, TEMPLATE)):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items()
                                  if k in ("mode", "is_streaming", "cache_source", "le")))
            if s.labels.get("tp_rank", "0") == "0":
                samples[(s.name, labels)] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


DECODE = ("sglang:cuda_graph_passes_total", {"mode": "decode_cuda_graph"})
PREFILL = ("sglang:cuda_graph_passes_total", {"mode": "prefill_cuda_graph"})
ITL_COUNT = ("sglang:inter_token_latency_seconds_count", {})


def read(samples: dict, key: tuple[str, dict]) -> float:
    return value(samples, key[0], **key[1]) or 0.0


def a_then_b(policy: Policy) -> tuple[SimEngine, Clock, list[dict]]:
    """A decodes on 64K; B's 64K prompt arrives at +5 s. Scrapes once B's first chunk
    runs and again at B's first token."""
    clock = Clock()
    state = SimEngine(clock=clock, policy=policy, max_total_num_tokens=1_000_000)
    a = state.submit(65536, 10**6, cached={"device": 65535})
    clock.now += 5.0
    b = state.submit(65536, 1)
    clock.now += 2.4  # B is past the tokenizer and its first chunk is running
    scrapes = [scrape(state)]
    while not b.done:  # event by event, so the last scrape is at B's first token
        clock.now = state.scheduler.next_event_time()
        state.advance()
    scrapes.append(scrape(state))
    assert a.generated > 0
    return state, clock, scrapes


def test_default_policy_decode_stands_still_while_prefill_moves():
    _, _, scrapes = a_then_b(Policy())
    first, last = scrapes[0], scrapes[-1]
    assert read(last, DECODE) == read(first, DECODE)  # A gets no decode batch
    assert read(last, ITL_COUNT) == read(first, ITL_COUNT)
    assert read(last, PREFILL) - read(first, PREFILL) == 16  # 64K in 4K chunks
    compute = ("sglang:realtime_tokens_total", {"mode": "prefill_compute"})
    assert read(last, compute) - read(first, compute) == 65536
    decode_tokens = ("sglang:realtime_tokens_total", {"mode": "decode"})
    assert read(last, decode_tokens) == read(first, decode_tokens)
    # The running gauge is refreshed by each prefill batch: A runs, B prefills.
    assert value(last, "sglang:num_running_reqs") == 1


def test_mixed_chunk_tokens_flow_but_the_decode_counter_does_not():
    _, _, scrapes = a_then_b(Policy(enable_mixed_chunk=True))
    first, last = scrapes[0], scrapes[-1]
    assert read(last, DECODE) == read(first, DECODE)
    mixed = read(last, PREFILL) - read(first, PREFILL)
    assert mixed == 17  # the chunk budget is cut by the running request: 16 x 4095 + 16
    # A's tokens inside mixed batches reach the tokenizer: one per mixed batch.
    assert read(last, ITL_COUNT) - read(first, ITL_COUNT) == mixed


def test_n1_decode_batches_between_chunks():
    _, _, scrapes = a_then_b(Policy(max_consecutive_prefill_batches=1))
    first, last = scrapes[0], scrapes[-1]
    chunks = read(last, PREFILL) - read(first, PREFILL)
    assert chunks == 16
    assert read(last, DECODE) - read(first, DECODE) == 15  # one between each two chunks


def test_finished_requests_count_tokens_and_latencies():
    clock = Clock()
    state = SimEngine(clock=clock, hicache_host_total_tokens=319193)
    state.submit(1000, 20, cached={"device": 600, "host": 300})
    state.submit(500, 10, stream=False)
    clock.now += 30
    s = scrape(state)
    assert value(s, "sglang:prompt_tokens_total", is_streaming="true") == 1000
    assert value(s, "sglang:prompt_tokens_total", is_streaming="false") == 500
    assert value(s, "sglang:generation_tokens_total", is_streaming="true") == 20
    assert value(s, "sglang:num_requests_total", is_streaming="false") == 1
    assert value(s, "sglang:cached_tokens_total", cache_source="device") == 600
    assert value(s, "sglang:cached_tokens_total", cache_source="host") == 300
    assert value(s, "sglang:time_to_first_token_seconds_count", is_streaming="true") == 1
    # Streaming: an event per token after the first. Non-streaming: SGLang sends it to
    # the tokenizer every 50 tokens or at its finish, so its one event is its "first
    # token" (TTFT observed at the finish) and it adds nothing to the ITL histogram.
    assert value(s, "sglang:inter_token_latency_seconds_count") == 19
    assert value(s, "sglang:time_to_first_token_seconds_count", is_streaming="false") == 1
    # HiCache: the L2 hit is loaded back, computed KV is backed up (write_through).
    assert state.loaded_back_tokens == 300
    assert state.backed_up_tokens == 100 + 500
    assert value(s, "sglang:hicache_host_used_tokens") == 600


def test_cache_hits_without_hicache_count_as_total():
    clock = Clock()
    state = SimEngine(clock=clock)
    state.submit(1000, 2, cached={"device": 600})
    clock.now += 10
    s = scrape(state)
    assert value(s, "sglang:cached_tokens_total", cache_source="total") == 600
    assert state.loaded_back_tokens is None and state.backed_up_tokens is None


def test_inter_token_histogram_keeps_the_pause_in_its_sum():
    clock = Clock()
    state = SimEngine(clock=clock)
    request = state.submit(100, 10**6)
    clock.now += 2.0
    state.pause_decode(10.0)
    clock.now += 12.0
    s = scrape(state)
    gaps = request.gaps()
    assert max(gaps) == pytest.approx(10.0, abs=0.05)
    assert value(s, "sglang:inter_token_latency_seconds_count") == len(gaps)
    assert value(s, "sglang:inter_token_latency_seconds_sum") == pytest.approx(sum(gaps))
    # The 10 s gap is one observation in the last bucket but one (le=+Inf is all).
    assert value(s, "sglang:inter_token_latency_seconds_bucket", le="8.0") == len(gaps) - 1


def test_queue_and_kv_usage_gauges():
    clock = Clock()
    state = SimEngine(clock=clock, policy=Policy(max_running_requests=1),
                      max_total_num_tokens=100_000)
    for _ in range(3):
        state.submit(10_000, 10**6)
    clock.now += 30
    s = scrape(state)
    assert value(s, "sglang:num_running_reqs") == 1
    assert value(s, "sglang:num_queue_reqs") == 2
    assert value(s, "sglang:token_usage") == pytest.approx(
        (10_000 + state.scheduler.running[0].generated) / 100_000, abs=0.01)


def test_synthetic_and_scheduled_load_add_up():
    clock = Clock()
    state = SimEngine(clock=clock, queued=2)
    state.running = 2
    state.submit(100, 10**6)
    clock.now += 10
    s = scrape(state)
    assert value(s, "sglang:num_running_reqs") == 3
    assert value(s, "sglang:num_queue_reqs") == 2
    scheduled = state.scheduler.counters.decode_batches
    assert read(s, DECODE) == 300 + scheduled  # 30 synthetic batches/s for 10 s


def test_restart_drops_requests_and_counters():
    clock = Clock()
    state = SimEngine(clock=clock)
    request = state.submit(100, 10**6)
    clock.now += 5
    state.restart()
    assert request.done
    clock.now += 5
    s = scrape(state)
    assert value(s, DECODE[0], **DECODE[1]) is None
    assert value(s, "sglang:inter_token_latency_seconds_count") is None
    assert value(s, "sglang:num_aborted_requests_total") is None


def test_wedged_engine_stops_the_scheduler():
    clock = Clock()
    state = SimEngine(clock=clock)
    request = state.submit(100, 10**6)
    clock.now += 1
    state.wedged = True
    tokens = request.generated
    clock.now += 30
    state.advance()
    assert request.generated == tokens
    state.wedged = False
    clock.now += 1
    state.advance()
    assert request.generated > tokens
    assert request.longest_gap() == pytest.approx(30.0, abs=0.05)


def test_loads_core_fields():
    clock = Clock()
    state = SimEngine(clock=clock, dp_size=2)
    state.submit(100, 10**6)
    clock.now += 1
    loads = state.loads()
    assert [entry["dp_rank"] for entry in loads] == [0, 1]
    core = loads[0]
    assert core["num_running_reqs"] == 1
    assert core["decode_moments"][0] == state.scheduler.counters.decode_batches
    assert core["max_total_num_tokens"] == 219005

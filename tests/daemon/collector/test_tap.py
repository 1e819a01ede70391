"""Stream tap families: per engine, labelled like the engine's own."""

from __future__ import annotations

import dataclasses

from exporter.config import AgentConfig
from exporter.daemon.tap.state import TapReading, TapState
from exporter.streams.histogram import Histogram
from tests.daemon.collector.registry import answered, collected

MAIN = {"engine": "main", "kind": "sglang"}


def tap_reading() -> TapReading:
    ttft, gaps = Histogram(), Histogram()
    ttft.observe(0.3)
    for gap in (0.02, 0.03, 47.2):
        gaps.observe(gap)
    return TapReading("sglang", "main",
                      {"ok": 41, "error": 1, "client_closed": 2, "untimed": 3},
                      tuple(ttft.buckets()), ttft.sum, tuple(gaps.buckets()), gaps.sum,
                      max_gap_seconds=47.2, active=2, generated_tokens=20566, frames=7012)


def test_stream_families_carry_the_engine_name_and_kind() -> None:
    registry = collected(answered("tap/main", tap_reading()))
    get = registry.get_sample_value
    requests = "rig_stream_requests_total"
    assert get(requests, {**MAIN, "outcome": "ok"}) == 41.0
    assert get(requests, {**MAIN, "outcome": "error"}) == 1.0
    assert get(requests, {**MAIN, "outcome": "client_closed"}) == 2.0
    assert get(requests, {**MAIN, "outcome": "untimed"}) == 3.0
    assert get("rig_stream_ttft_seconds_bucket", {**MAIN, "le": "0.25"}) == 0.0
    assert get("rig_stream_ttft_seconds_bucket", {**MAIN, "le": "0.5"}) == 1.0
    assert get("rig_stream_token_gap_seconds_bucket", {**MAIN, "le": "0.05"}) == 2.0
    assert get("rig_stream_token_gap_seconds_count", MAIN) == 3.0
    assert get("rig_stream_max_token_gap_seconds", MAIN) == 47.2
    assert get("rig_stream_active", MAIN) == 2.0
    assert get("rig_stream_generated_tokens_total", MAIN) == 20566.0
    assert get("rig_stream_frames_total", MAIN) == 7012.0
    assert get("rig_stream_active", {"engine": "sglang", "name": "main"}) is None


def test_an_idle_tap_reads_zeros_it_has_counted() -> None:
    idle = TapReading("sglang", "main", {"ok": 0, "error": 0, "client_closed": 0, "untimed": 0},
                      tuple(Histogram().buckets()), 0.0, tuple(Histogram().buckets()), 0.0,
                      max_gap_seconds=0.0, active=0, generated_tokens=0)
    registry = collected(answered("tap/main", idle))
    assert registry.get_sample_value("rig_stream_requests_total",
                                     {**MAIN, "outcome": "ok"}) == 0.0
    assert registry.get_sample_value("rig_stream_token_gap_seconds_count", MAIN) == 0.0
    assert registry.get_sample_value("rig_stream_max_token_gap_seconds", MAIN) == 0.0
    assert registry.get_sample_value("rig_stream_frames_total", MAIN) == 0.0


def test_the_longest_gap_says_the_window_in_force() -> None:
    reading = dataclasses.replace(tap_reading(), window_seconds=6.0)
    help_text = {f.name: f.documentation for f in collected(
        answered("tap/main", reading)).collect()}
    assert "in the last 6 s," in help_text["rig_stream_max_token_gap_seconds"]


def test_an_agent_with_no_traffic_yet_reads_its_counts_and_no_prompt() -> None:
    """What the tap has counted for an agent that has sent nothing is known: no
    request, no stream, no gap. What only a request can tell (the prompt it last sent,
    its cached share) is not, and stays absent rather than read 0."""
    state = TapState(lambda: 1000.0, name="main",
                     agents=[AgentConfig("analyst", header_name="X-Agent", header_value="a")])
    registry = collected(answered("tap/main", state.reading("sglang", "main")))
    analyst = {**MAIN, "agent": "analyst"}
    assert registry.get_sample_value("rig_agent_requests_total",
                                     {**analyst, "outcome": "ok"}) == 0.0
    assert registry.get_sample_value("rig_agent_streams_active", analyst) == 0.0
    assert registry.get_sample_value("rig_agent_max_token_gap_seconds", analyst) == 0.0
    assert registry.get_sample_value("rig_agent_last_prompt_tokens", analyst) is None
    assert registry.get_sample_value("rig_agent_cached_prompt_tokens_total", analyst) is None

"""Stream tap families from a TapReading.

    rig_stream_requests_total{engine="main",kind="sglang",outcome="ok"} 41.0
    rig_stream_ttft_seconds_bucket{engine="main",kind="sglang",le="0.5"} 38.0
    rig_stream_token_gap_seconds_bucket{engine="main",kind="sglang",le="0.05"} 20114.0
    rig_stream_max_token_gap_seconds{engine="main",kind="sglang"} 47.2
    rig_stream_active{engine="main",kind="sglang"} 2.0
    rig_stream_generated_tokens_total{engine="main",kind="sglang"} 20566.0
    rig_stream_frames_total{engine="main",kind="sglang"} 7012.0
    rig_agent_starved_seconds_total{engine="main",kind="sglang",agent="analyst",by="creative"} 47.2

Per agent (docs/metrics.md#per-agent): the engine's labels plus `agent`, one series per
configured agent and `other`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from exporter.daemon.collector.families import (
    PREFIX,
    counter,
    engine_label_values,
    families,
    gauge,
    non_empty,
)
from exporter.daemon.tap.state import OUTCOMES, TapReading
from exporter.daemon.tap.tally import AgentReading
from exporter.schema import ENGINE_LABELS

AGENT_LABELS = (*ENGINE_LABELS, "agent")


@families.register
def _(reading: TapReading) -> Iterator[Metric]:
    ids = engine_label_values(reading)
    requests = counter("stream_requests_total",
                       "Tap: streaming generation requests by outcome: ok, error (an HTTP "
                       "error, an error frame, the engine unreachable or broken), "
                       "client_closed (before the headers or after), untimed (a stream the "
                       "tap cannot read, relayed all the same).",
                       [*ENGINE_LABELS, "outcome"])
    for outcome in OUTCOMES:
        requests.add_metric([*ids, outcome], reading.requests[outcome])
    yield requests
    ttft = HistogramMetricFamily(PREFIX + "stream_ttft_seconds",
                                 "Tap: from the request sent upstream to the first frame "
                                 "with a token, per streamed response.", labels=ENGINE_LABELS)
    ttft.add_metric(ids, list(reading.ttft_buckets), reading.ttft_sum)
    yield ttft
    gaps = HistogramMetricFamily(PREFIX + "stream_token_gap_seconds",
                                 "Tap: every gap between frames with tokens, all streams.",
                                 labels=ENGINE_LABELS)
    gaps.add_metric(ids, list(reading.gap_buckets), reading.gap_sum)
    yield gaps
    longest = gauge("stream_max_token_gap_seconds",
                    "Tap: the longest gap between tokens of any stream in the last "
                    f"{reading.window_seconds:g} s, a gap still open included.", ENGINE_LABELS)
    longest.add_metric(ids, reading.max_gap_seconds)
    yield longest
    active = gauge("stream_active", "Tap: streamed responses in flight.", ENGINE_LABELS)
    active.add_metric(ids, reading.active)
    yield active
    tokens = counter("stream_generated_tokens_total",
                     "Tap: tokens generated in streamed responses, as the streams reported "
                     "them (meta_info, usage); a stream that reports none adds none.",
                     ENGINE_LABELS)
    tokens.add_metric(ids, reading.generated_tokens)
    yield tokens
    frames = counter("stream_frames_total",
                     "Tap: frames that carried tokens, all streams (under speculative "
                     "decoding one frame carries several tokens).", ENGINE_LABELS)
    frames.add_metric(ids, reading.frames)
    yield frames
    yield from _agent_families(ids, reading.agents, reading.window_seconds)


def _agent_families(ids: list[str], agents: tuple[AgentReading, ...],
                    window_seconds: float) -> Iterator[Metric]:
    requests = counter("agent_requests_total", "Tap, per agent: streaming generation "
                       "requests by outcome, as rig_stream_requests_total.",
                       [*AGENT_LABELS, "outcome"])
    ttft = HistogramMetricFamily(PREFIX + "agent_ttft_seconds", "Tap, per agent: from the "
                                 "request sent upstream to its first token.",
                                 labels=AGENT_LABELS)
    starved = counter("agent_starved_seconds_total",
                      "Tap, per agent: seconds its streams stood still in gaps of 1 s or "
                      "more while agent `by` had a request waiting for its first token "
                      "(by=\"none\": no request waited); a stall under way included.",
                      [*AGENT_LABELS, "by"])
    cached = counter("agent_cached_prompt_tokens_total", "Tap, per agent: prompt tokens "
                     "the engine served from its cache, as the streams reported them.",
                     AGENT_LABELS)
    last_prompt = gauge("agent_last_prompt_tokens", "Tap, per agent: the prompt it last "
                        "sent, as the engine counted it (its context size).", AGENT_LABELS)
    plain = {
        "agent_streams_active": (gauge, "Tap, per agent: streamed responses in flight.",
                                 lambda a: a.streams_active),
        "agent_prompt_tokens_total": (counter, "Tap, per agent: prompt tokens, as the "
                                      "streams reported them.", lambda a: a.prompt_tokens),
        "agent_generated_tokens_total": (counter, "Tap, per agent: tokens generated, as the "
                                         "streams reported them.",
                                         lambda a: a.generated_tokens),
        "agent_max_token_gap_seconds": (gauge, "Tap, per agent: the longest gap between "
                                        f"tokens of its streams in the last "
                                        f"{window_seconds:g} s, a gap still open included.",
                                        lambda a: a.max_gap_seconds),
        "agent_longest_request_seconds": (gauge, "Tap, per agent: the age of its oldest "
                                          "streaming request in flight, 0 when none.",
                                          lambda a: a.longest_request_seconds),
        "agent_longest_first_token_wait_seconds": (
            gauge, "Tap, per agent: the age of its oldest request still waiting for its "
            "first token, 0 when none.", lambda a: a.longest_first_token_wait_seconds),
        "agent_unbounded_requests_total": (counter, "Tap, per agent: requests sent without "
                                           "max_tokens, max_completion_tokens or "
                                           "max_new_tokens.", lambda a: a.unbounded_requests),
        "agent_response_tokens_max": (gauge, "Tap, per agent: the largest response in "
                                      "flight, in generated tokens (at least), 0 when none.",
                                      lambda a: a.response_tokens_max),
        "agent_unbounded_response_tokens_max": (
            gauge, "Tap, per agent: the largest response in flight of an unbounded request, "
            "in generated tokens (at least), 0 when none.",
            lambda a: a.unbounded_response_tokens_max),
    }
    built = {name: make(name, doc, AGENT_LABELS) for name, (make, doc, _) in plain.items()}
    for agent in agents:
        labels = [*ids, agent.name]
        for outcome in OUTCOMES:
            requests.add_metric([*labels, outcome], agent.requests[outcome])
        ttft.add_metric(labels, list(agent.ttft_buckets), agent.ttft_sum)
        for by, seconds in agent.starved_seconds.items():
            starved.add_metric([*labels, by], seconds)
        if agent.cached_prompt_tokens is not None:
            cached.add_metric(labels, agent.cached_prompt_tokens)
        if agent.last_prompt_tokens is not None:
            last_prompt.add_metric(labels, agent.last_prompt_tokens)
        for name, (_, _, value) in plain.items():
            built[name].add_metric(labels, value(agent))
    yield requests
    yield ttft
    yield from built.values()
    yield starved
    yield from non_empty(cached, last_prompt)

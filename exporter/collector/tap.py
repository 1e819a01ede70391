"""Stream tap families from a TapReading.

    rig_stream_requests_total{engine="main",kind="sglang",outcome="ok"} 41.0
    rig_stream_ttft_seconds_bucket{engine="main",kind="sglang",le="0.5"} 38.0
    rig_stream_token_gap_seconds_bucket{engine="main",kind="sglang",le="0.05"} 20114.0
    rig_stream_max_token_gap_seconds{engine="main",kind="sglang"} 47.2
    rig_stream_active{engine="main",kind="sglang"} 2.0
    rig_stream_generated_tokens_total{engine="main",kind="sglang"} 20566.0
    rig_stream_frames_total{engine="main",kind="sglang"} 7012.0
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from exporter.collector.families import (
    ENGINE_LABELS,
    PREFIX,
    counter,
    engine_label_values,
    families,
    gauge,
)
from exporter.tap.state import OUTCOMES, TapReading


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

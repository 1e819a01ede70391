"""StreamMeter: which frames are timed, and what the timing says (simulated time)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.streams import StreamMeter


def data(body: object) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def native(tokens: int) -> bytes:
    return data({"text": "t" * tokens, "meta_info": {"completion_tokens": tokens,
                                                     "cached_tokens": 5}})


def chat(content: str) -> bytes:
    return data({"choices": [{"index": 0, "delta": {"content": content}}]})


def test_native_stream_ttft_gaps_rate():
    meter = StreamMeter(sent_at=10.0)
    assert meter.feed(native(2), 10.4) == []
    assert meter.feed(native(2), 10.9) == []  # no new token: ends no gap
    assert meter.feed(native(4), 11.4) == [pytest.approx(1.0)]
    assert meter.feed(native(6) + native(8), 11.6) == [pytest.approx(0.2), 0.0]
    meter.feed(b"data: [DONE]\n\n", 11.7)
    timing = meter.timer.timing()
    assert meter.done and meter.cached_tokens == 5
    assert timing.ttft_seconds == pytest.approx(0.4)
    assert timing.gaps_seconds == pytest.approx((1.0, 0.2, 0.0))
    assert timing.max_gap_seconds == pytest.approx(1.0)
    assert timing.tokens == 8
    assert timing.decode_tokens_per_second == pytest.approx(6 / 1.2)


def test_openai_stream_counts_chunks_then_takes_the_usage():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(data({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
               0.1)
    meter.feed(chat("Hel"), 0.5)
    meter.feed(chat("lo"), 0.6)
    meter.feed(data({"choices": [], "usage": {"completion_tokens": 3,
                                              "prompt_tokens_details": {"cached_tokens": 64}}}),
               0.7)
    timing = meter.timer.timing()
    assert timing.ttft_seconds == pytest.approx(0.5)  # the role chunk is not a token
    assert timing.gaps_seconds == pytest.approx((0.1,))
    assert timing.tokens == 3 and meter.cached_tokens == 64


def test_open_gap_after_the_first_token_only():
    meter = StreamMeter(sent_at=0.0, keep_gaps=False)
    assert meter.timer.open_gap(30.0) is None  # still waiting for the first token
    meter.feed(chat("a"), 1.0)
    meter.feed(chat("b"), 1.5)
    assert meter.timer.open_gap(48.0) == pytest.approx(46.5)
    timing = meter.timer.timing(open_until=48.0)
    assert timing.max_gap_seconds == pytest.approx(46.5)
    assert timing.gaps_seconds == () and timing.gap_count == 1


def test_error_frame_and_unrecognised_frames_are_kept_apart():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(b'data: {"error": {"message": "out of memory"}}\n\ndata: what\n\n', 1.0)
    assert meter.error == "out of memory"
    assert meter.unrecognised == 1 and meter.first_unrecognised == b"what"


def test_histogram_buckets_are_cumulative_and_le():
    from exporter.streams import Histogram

    histogram = Histogram(bounds=(0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 1.0, 47.0):
        histogram.observe(seconds)
    assert histogram.buckets() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert histogram.sum == pytest.approx(48.65) and histogram.count == 5


def test_a_frame_is_timed_when_its_line_completes_however_the_reads_cut_it():
    a, b, c = native(1), native(2), chat("x")
    body = a + b + c
    cut1, cut2 = len(a) // 2, len(a) + len(b) + 5
    meter = StreamMeter(sent_at=0.0)
    assert meter.feed(body[:cut1], 1.0) == []  # half a frame is no token yet
    assert meter.timer.first_at is None
    # The rest of a, all of b and the start of c in one read: a and b at its time.
    assert meter.feed(body[cut1:cut2], 2.0) == [0.0]
    assert meter.timer.first_at == 2.0 and meter.timer.tokens == 2
    assert meter.feed(body[cut2:], 3.5) == [1.5]
    assert meter.timer.tokens == 3


def test_a_frame_larger_than_a_read_is_timed_at_its_last_piece():
    big = data({"text": "w" * 300_000, "output_ids": list(range(40_000)),
                "meta_info": {"completion_tokens": 40_000, "cached_tokens": 7}})
    meter = StreamMeter(sent_at=0.0)
    meter.feed(native(1), 0.5)
    pieces = [big[i:i + 65536] for i in range(0, len(big), 65536)]
    for n, piece in enumerate(pieces[:-1]):
        assert meter.feed(piece, 1.0 + n) == []
    assert meter.feed(pieces[-1], 9.0) == [pytest.approx(8.5)]
    assert meter.timer.tokens == 40_000 and meter.cached_tokens == 7


@settings(deadline=None)  # a loaded box may pause any example
@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=10))
def test_any_cut_times_the_same_frames(cuts):
    body = b"".join([native(1), chat("a"), native(3), b"data: [DONE]\n\n"])
    edges = [0, *sorted(min(c, len(body)) for c in cuts), len(body)]
    meter = StreamMeter(sent_at=0.0)
    gaps = [g for n, (x, y) in enumerate(zip(edges, edges[1:], strict=False))
            for g in meter.feed(body[x:y], float(n))]
    assert len(gaps) == 2 and meter.timer.tokens == 3 and meter.done
    assert sum(gaps) == meter.timer.last_at - meter.timer.first_at

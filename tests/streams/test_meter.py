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


def test_openai_stream_counts_frames_and_takes_tokens_from_the_usage_only():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(data({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
               0.1)
    meter.feed(chat("Hel"), 0.5)
    meter.feed(chat("lo"), 0.6)
    assert (meter.timer.frames, meter.timer.tokens) == (2, None)  # no count yet: none made up
    meter.feed(data({"choices": [], "usage": {"completion_tokens": 3,
                                              "prompt_tokens_details": {"cached_tokens": 64}}}),
               0.7)
    timing = meter.timer.timing()
    assert timing.ttft_seconds == pytest.approx(0.5)  # the role chunk is not a token
    assert timing.gaps_seconds == pytest.approx((0.1,))
    assert timing.tokens == 3 and meter.cached_tokens == 64 and timing.frames == 2
    # Counted only at the end: no decode rate between the frames.
    assert timing.decode_tokens_per_second is None


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
    assert (meter.timer.frames, meter.timer.tokens) == (3, 2)  # the chat frame has no count


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
    assert len(gaps) == 2 and meter.timer.tokens == 3 and meter.timer.frames == 3 and meter.done
    assert sum(gaps) == meter.timer.last_at - meter.timer.first_at


# ---- speculative decoding: a frame carries several tokens (MTP=3: up to 4 a step)

def test_multi_token_chunks_count_what_the_usage_says_never_one_per_chunk():
    without = StreamMeter(sent_at=0.0)
    final = StreamMeter(sent_at=0.0)
    continuous = StreamMeter(sent_at=0.0)
    for i in range(10):  # 10 chunks of 3 tokens
        without.feed(chat("abc"), 0.1 * (i + 1))
        final.feed(chat("abc"), 0.1 * (i + 1))
        continuous.feed(data({"choices": [{"index": 0, "delta": {"content": "abc"}}],
                              "usage": {"completion_tokens": 3 * (i + 1)}}), 0.1 * (i + 1))
    final.feed(data({"choices": [], "usage": {"completion_tokens": 30}}), 1.05)
    assert (without.timer.frames, without.timer.tokens) == (10, None)
    assert (final.timer.frames, final.timer.tokens) == (10, 30)
    assert (continuous.timer.frames, continuous.timer.tokens) == (10, 30)
    assert continuous.timer.timing().decode_tokens_per_second == pytest.approx(27 / 0.9)
    assert without.timer.timing().decode_tokens_per_second is None


def event(kind: str, body: dict) -> bytes:
    """One typed SSE event as SGLang writes them: `event:` then `data:` with its type."""
    return f"event: {kind}\n".encode() + data({"type": kind, **body})


def test_anthropic_messages_stream():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(event("message_start", {"message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
        "usage": {"input_tokens": 9, "cache_read_input_tokens": 4, "output_tokens": 0}}}), 0.2)
    meter.feed(event("content_block_start", {"index": 0, "content_block": {
        "type": "thinking", "thinking": ""}}), 0.2)
    meter.feed(event("content_block_delta", {"index": 0, "delta": {
        "type": "thinking_delta", "thinking": "hm"}}), 0.5)
    meter.feed(event("content_block_delta", {"index": 0, "delta": {
        "type": "signature_delta", "signature": "sig"}}), 0.6)  # no token
    meter.feed(event("content_block_stop", {"index": 0}), 0.6)
    meter.feed(event("content_block_delta", {"index": 1, "delta": {
        "type": "text_delta", "text": "Hello there"}}), 0.9)
    meter.feed(event("content_block_delta", {"index": 2, "delta": {
        "type": "input_json_delta", "partial_json": "{"}}), 1.0)
    assert not meter.done
    meter.feed(event("message_delta", {"delta": {"stop_reason": "end_turn"},
                                       "usage": {"output_tokens": 7}}), 1.1)
    meter.feed(event("message_stop", {}), 1.1)
    timing = meter.timer.timing()
    assert meter.done and meter.error is None and meter.unrecognised == 0
    assert timing.ttft_seconds == pytest.approx(0.5)
    assert timing.gaps_seconds == pytest.approx((0.4, 0.1))
    assert (timing.frames, timing.tokens, meter.cached_tokens) == (3, 7, 4)


def test_anthropic_error_event():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(event("error", {"error": {"type": "api_error", "message": "Backend produced "
                                                                         "no content"}}), 0.1)
    assert meter.error == "Backend produced no content"


def test_responses_stream():
    meter = StreamMeter(sent_at=0.0)
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "usage": None}
    meter.feed(event("response.created", {"sequence_number": 0, "response": response}), 0.1)
    meter.feed(event("response.in_progress", {"sequence_number": 1, "response": response}), 0.1)
    meter.feed(event("response.output_item.added", {"output_index": 0, "item": {
        "type": "reasoning", "id": "r"}}), 0.2)
    meter.feed(event("response.reasoning_text.delta", {"delta": "hm", "item_id": "r"}), 0.3)
    meter.feed(event("response.content_part.added", {"part": {"type": "output_text",
                                                              "text": ""}}), 0.4)
    meter.feed(event("response.output_text.delta", {"delta": "", "item_id": "m"}), 0.45)
    meter.feed(event("response.output_text.delta", {"delta": "Hi", "item_id": "m"}), 0.5)
    meter.feed(event("response.output_text.done", {"text": "Hi", "item_id": "m"}), 0.6)
    assert not meter.done
    meter.feed(event("response.completed", {"response": {**response, "status": "completed",
        "usage": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 2},
                  "output_tokens": 5, "total_tokens": 14}}}), 0.7)
    timing = meter.timer.timing()
    assert meter.done and meter.error is None and meter.unrecognised == 0
    assert timing.ttft_seconds == pytest.approx(0.3)
    assert timing.gaps_seconds == pytest.approx((0.2,))
    assert (timing.frames, timing.tokens, meter.cached_tokens) == (2, 5, 2)


def test_responses_incomplete_counts_and_failed_is_an_error():
    incomplete = StreamMeter(sent_at=0.0)
    incomplete.feed(event("response.output_text.delta", {"delta": "a"}), 0.1)
    incomplete.feed(event("response.incomplete", {"response": {
        "status": "incomplete", "usage": {"output_tokens": 4}}}), 0.2)
    assert incomplete.done and incomplete.timer.tokens == 4 and incomplete.error is None
    failed = StreamMeter(sent_at=0.0)
    failed.feed(event("response.failed", {"response": {
        "status": "failed", "usage": None,
        "error": {"code": "server_error", "message": "KV  pool\nexhausted"}}}), 0.1)
    assert failed.done and failed.error == "KV pool exhausted" and failed.timer.tokens is None


def _vllm_chat(content: str | None, tokens: int, role: bool = False) -> bytes:
    """vLLM 0.32's chat chunk with continuous_usage_stats."""
    delta = {"role": "assistant", "content": ""} if role else {"content": content}
    return data({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "tiny",
                 "choices": [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": None}],
                 "usage": {"prompt_tokens": 17, "total_tokens": 17 + tokens,
                           "completion_tokens": tokens, "completion_tokens_details": None}})


def _llamacpp_completion(text: str, usage: dict | None = None) -> bytes:
    """llama.cpp's /v1/completions frame: usage and timings on the finish_reason frame only."""
    body: dict = {"choices": [{"text": text, "index": 0, "logprobs": None,
                               "finish_reason": None if usage is None else "length"}],
                  "object": "text_completion", "system_fingerprint": "b1-0c1e570"}
    if usage is not None:
        body["usage"] = usage
        body["timings"] = {"cache_n": 0, "prompt_n": 3, "predicted_n": usage["completion_tokens"]}
    return data(body)


def test_tokens_from_continuous_usage_vllm():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(_vllm_chat(None, 0, role=True), 0.1)
    meter.feed(_vllm_chat(" shing", 1), 0.2)
    meter.feed(_vllm_chat("atment quex", 3), 0.3)  # two tokens held in one frame
    meter.feed(data({"id": "chatcmpl-1", "choices": [],
                     "usage": {"prompt_tokens": 17, "completion_tokens": 3}}), 0.3)
    timing = meter.timer.timing()
    assert (timing.tokens_from, timing.frames, timing.tokens) == ("continuous_usage", 2, 3)
    assert timing.decode_tokens_per_second == pytest.approx(2 / 0.1)


def test_tokens_from_final_usage_llamacpp():
    meter = StreamMeter(sent_at=0.0)
    for at, text in ((0.1, "ml"), (0.2, " integers"), (0.3, " Key")):
        meter.feed(_llamacpp_completion(text), at)
    assert meter.timer.tokens_from == "frames"  # until the finish frame counts them
    meter.feed(_llamacpp_completion("", {"completion_tokens": 4, "prompt_tokens": 3,
                                         "total_tokens": 7}), 0.3)
    meter.feed(b"data: [DONE]\n\n", 0.3)
    timing = meter.timer.timing()
    assert (timing.tokens_from, timing.frames, timing.tokens) == ("final_usage", 3, 4)
    assert timing.decode_tokens_per_second is None and meter.prompt_tokens == 3


def test_tokens_from_frames_when_the_stream_never_counts():
    meter = StreamMeter(sent_at=0.0)
    for at in (0.1, 0.2, 0.35):
        meter.feed(_llamacpp_completion("x"), at)
    meter.feed(b"data: [DONE]\n\n", 0.4)
    timing = meter.timer.timing()
    assert (timing.tokens_from, timing.frames, timing.tokens) == ("frames", 3, None)
    assert timing.max_gap_seconds == pytest.approx(0.15)


def test_tokens_from_native_frames_is_continuous():
    meter = StreamMeter(sent_at=0.0)
    meter.feed(native(2) + native(4), 0.1)
    assert meter.timer.tokens_from == "continuous_usage"

"""TapState on simulated time: the stall window, open gaps, outcomes, bounded memory."""

from __future__ import annotations

import json

import pytest

from exporter.daemon.tap.state import TapState
from exporter.thresholds import Thresholds

WINDOW_SECONDS = Thresholds().decode_stall_window_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chunk(content: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": {"content": content}}]}).encode() + b"\n\n"


def test_max_gap_holds_for_60_s_then_goes():
    clock = Clock()
    state = TapState(clock)
    stream = state.open(clock.now)
    for at in (0.3, 0.35, 47.55, 47.6):  # a 47.2 s starvation pause
        clock.now = 1000.0 + at
        state.chunk(stream, chunk("x"))
    state.close(stream, "ok")
    assert state.max_gap() == pytest.approx(47.2)
    clock.now += WINDOW_SECONDS - 1.5
    assert state.max_gap() == pytest.approx(47.2)
    clock.now += 1.5
    assert state.max_gap() == pytest.approx(0.0)
    # Chat chunks without usage: four frames, and no token count made up for them.
    assert state.requests["ok"] == 1 and (state.frames, state.generated_tokens) == (4, 0)


def test_a_configured_window_forgets_sooner():
    clock = Clock()
    state = TapState(clock, window_seconds=6)
    stream = state.open(clock.now)
    for at in (0.5, 4.5):  # a 4 s gap, ended in second 1004
        clock.now = 1000.0 + at
        state.chunk(stream, chunk("x"))
    state.close(stream, "ok")
    clock.now = 1009.5
    assert state.reading("sglang", "main").max_gap_seconds == pytest.approx(4.0)
    clock.now = 1010.5
    reading = state.reading("sglang", "main")
    assert (reading.max_gap_seconds, reading.window_seconds) == (0.0, 6)


def test_open_gap_counts_while_open_and_after_the_client_gives_up():
    clock = Clock()
    state = TapState(clock)
    stream = state.open(clock.now)
    clock.now += 20.0
    assert state.max_gap() == 0.0  # waiting for the first token is TTFT, not a gap
    state.chunk(stream, chunk("a"))
    clock.now += 12.0
    assert state.max_gap() == pytest.approx(12.0)
    assert state.reading("sglang", "main").active == 1
    clock.now += 3.0
    state.close(stream, "client_closed")
    clock.now += 10.0
    reading = state.reading("sglang", "main")
    assert reading.max_gap_seconds == pytest.approx(15.0)
    assert reading.requests == {"ok": 0, "error": 0, "client_closed": 1, "untimed": 0}
    assert reading.active == 0
    assert reading.ttft_sum == pytest.approx(20.0)


def test_window_memory_is_bounded():
    clock = Clock()
    state = TapState(clock)
    stream = state.open(clock.now)
    for _ in range(10_000):  # 100 frames/s for 100 s
        clock.now += 0.01
        state.chunk(stream, chunk("x"))
    assert len(state.recent) <= WINDOW_SECONDS + 1
    assert state.gaps.count == 9_999


def event(body: dict) -> bytes:
    return f"event: {body['type']}\ndata: {json.dumps(body)}\n\n".encode()


def test_cache_reads_given_after_the_prompt_are_counted_once():
    # vLLM's /v1/messages: message_start has the whole prompt and no cache reads; the
    # closing message_delta has the uncached part and the cache reads.
    clock = Clock()
    state = TapState(clock)
    stream = state.open(clock.now)
    state.chunk(stream, event({"type": "message_start", "message": {
        "id": "m", "type": "message", "usage": {"input_tokens": 1093, "output_tokens": 0}}}))
    state.chunk(stream, event({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": "x"}}))
    for _ in range(2):  # a second usage frame adds nothing
        state.chunk(stream, event({"type": "message_delta", "delta": {}, "usage": {
            "input_tokens": 69, "cache_read_input_tokens": 1024, "output_tokens": 1}}))
    state.close(stream, "ok")
    other = next(a for a in state.reading("vllm", "main").agents if a.name == "other")
    assert (other.prompt_tokens, other.cached_prompt_tokens, other.last_prompt_tokens) == (
        1093, 1024, 1093)

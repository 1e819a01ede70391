"""llama.cpp's stream frames as a real llama-server wrote them
(tests/fixtures/llamacpp/streams.txt), read and timed by the meter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.streams import StreamMeter
from exporter.streams.frames import decode_frame, parse_frame

STREAMS = Path(__file__).parent.parent / "fixtures" / "llamacpp" / "streams.txt"


def captured(section: str) -> list[tuple[float, bytes]]:
    """(ms after the request, payload) of each frame captured under `### section`."""
    frames, inside = [], False
    for line in STREAMS.read_text().splitlines():
        if line.startswith("### "):
            inside = line[4:] == section
        elif inside and line.startswith("[") and "] data: " in line:
            stamp, _, payload = line.partition("] data: ")
            frames.append((float(stamp[1:].split()[0]), payload.encode()))
    assert frames, section
    return frames


def metered(section: str) -> StreamMeter:
    meter = StreamMeter(sent_at=0.0)
    for ms, payload in captured(section):
        meter.feed(b"data: " + payload + b"\n\n", ms / 1000)
    return meter


def test_native_completion_frames():
    frames = [parse_frame(p) for _, p in captured("/completion")]
    assert all(f.recognised for f in frames)
    assert [f.completion_tokens for f in frames[:-1]] == [1, 2, 3, 4, 5]
    assert not any(f.done for f in frames[:-1])
    last = frames[-1]
    # timings.cache_n is the prompt's cached part; tokens_cached (10) is the slot's
    # whole cache after the request and is not read as cached prompt tokens.
    assert (last.done, last.completion_tokens, last.cached_tokens, last.prompt_tokens) == (
        True, 8, 2, 3)
    # The fast path and the whole decode agree.
    assert [decode_frame(p) for _, p in captured("/completion")] == frames


def test_native_stream_is_timed_and_ends_without_done_marker():
    meter = metered("/completion")
    timing = meter.timer.timing()
    assert meter.done and meter.unrecognised == 0
    assert timing.tokens == 8 and meter.cached_tokens == 2 and meter.prompt_tokens == 3
    assert timing.ttft_seconds == pytest.approx(0.0063)
    # Five token-bearing frames were captured and three elided: the final frame says 8
    # where the last one seen said 5, so it ends a fifth gap.
    assert len(timing.gaps_seconds) == 5


@pytest.mark.parametrize("section,tokens,cached,prompt", [
    ("chat include_usage+continuous_usage_stats", 8, 0, 13),
    ("v1/completions include_usage+continuous_usage_stats", 8, 0, 3),
])
def test_openai_routes_count_from_usage(section, tokens, cached, prompt):
    meter = metered(section)
    assert meter.unrecognised == 0
    assert (meter.timer.timing().tokens, meter.cached_tokens, meter.prompt_tokens) == (
        tokens, cached, prompt)


def test_timings_without_usage():
    """`timings_per_token`: a chunk with timings and no usage still says the counts."""
    frame = parse_frame(json.dumps({
        "choices": [{"index": 0, "delta": {"content": "x"}}],
        "timings": {"cache_n": 4096, "prompt_n": 12, "predicted_n": 7}}).encode())
    assert (frame.content, frame.completion_tokens, frame.cached_tokens,
            frame.prompt_tokens) == (True, 7, 4096, 4108)


def test_prompt_progress_frame_carries_no_token():
    frame = parse_frame(json.dumps({
        "index": 0, "content": "", "tokens": [], "stop": False, "id_slot": 0,
        "tokens_predicted": 0, "tokens_evaluated": 16384,
        "prompt_progress": {"total": 16384, "cache": 0, "processed": 2048}}).encode())
    assert frame.recognised and frame.completion_tokens == 0 and not frame.done

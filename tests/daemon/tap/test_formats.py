"""The tap with real clients (the official `openai` package, httpx, curl) over loopback HTTP,
in front of the stand-in engine: tokens counted only as the streams report them, the
Anthropic Messages and OpenAI Responses streams timed, and the outcomes of generation
requests (docs/tap.md#what-it-measures)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time

import httpx
import openai
import pytest

from exporter.daemon.tap.state import TapReading
from tests.daemon.tap.standin import (
    CONTEXT_BYTES,
    MODEL,
    PATHS,
    Script,
    StandIn,
    stream_bytes,
    tap_before,
)

# MTP=3: a decode step accepts up to four tokens; three a frame here.
MTP_SCRIPT = Script(shape="chat", first_token_seconds=0.05, gaps_seconds=(0.02,) * 9,
                    tokens_per_frame=3, usage="asked")


def client(tap_url: str, **options: object) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=tap_url + "/v1", api_key="none", max_retries=0,
                              **options)


async def chat_stream(tap_url: str, **options: object) -> str:
    text = ""
    stream = await client(tap_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True, **options)
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return text


# ---- 1. tokens, not frames

@pytest.mark.parametrize(("options", "tokens"), [
    ({}, 0),  # the stream never says: no count made up
    ({"stream_options": {"include_usage": True}}, 30),  # the final usage chunk
    ({"stream_options": {"include_usage": True, "continuous_usage_stats": True}}, 30),
], ids=["no-usage", "final-usage", "continuous-usage"])
def test_multi_token_chunks_count_the_tokens_the_stream_reports(options, tokens):
    async def scenario() -> tuple[str, TapReading]:
        async with tap_before(StandIn(MTP_SCRIPT)) as (tap, url):
            return await chat_stream(url, **options), await tap.read()

    text, reading = asyncio.run(scenario())
    assert text.split() == [f"w{n}" for n in range(30)]  # 10 chunks of 3 tokens arrived
    assert reading.frames == 10
    assert reading.generated_tokens == tokens
    assert reading.requests["ok"] == 1 and reading.gap_buckets[-1] == ("+Inf", 9.0)


def test_native_multi_token_frames_count_meta_info():
    script = Script(shape="native", gaps_seconds=(0.01,) * 9, tokens_per_frame=3)

    async def scenario() -> tuple[bytes, TapReading]:
        async with tap_before(StandIn(script)) as (tap, url), httpx.AsyncClient() as http:
            answer = await http.post(url + "/generate", json={"text": "hi", "stream": True})
            return answer.content, await tap.read()

    body, reading = asyncio.run(scenario())
    head, frames = stream_bytes(script)
    assert body == head + b"".join(frames)
    assert (reading.frames, reading.generated_tokens) == (10, 30)


# ---- 2. the Anthropic Messages and OpenAI Responses streams

def timed_against(standin: StandIn, reading: TapReading, script: Script) -> None:
    arrived, *written = standin.timelines[0]
    sent_gaps = [b - a for a, b in zip(written, written[1:], strict=False)]
    assert reading.ttft_buckets[-1] == ("+Inf", 1.0)
    assert reading.ttft_sum == pytest.approx(written[0] - arrived, abs=0.05)
    assert reading.gap_buckets[-1] == ("+Inf", float(script.frames - 1))
    assert reading.gap_sum == pytest.approx(sum(sent_gaps), abs=0.05)
    assert reading.max_gap_seconds == pytest.approx(max(sent_gaps), abs=0.05)
    assert (reading.frames, reading.generated_tokens) == (script.frames, script.tokens)
    assert reading.requests == {"ok": 1, "error": 0, "client_closed": 0, "untimed": 0}


def test_anthropic_messages_stream_is_timed_through_httpx():
    script = Script(shape="messages", first_token_seconds=0.2,
                    gaps_seconds=(0.05, 0.3, 0.02, 0.02), tokens_per_frame=2)
    standin = StandIn(script)
    asked = {"model": MODEL, "max_tokens": 64, "stream": True,
             "messages": [{"role": "user", "content": "hi"}]}

    async def scenario() -> tuple[bytes, TapReading]:
        async with tap_before(standin) as (tap, url), httpx.AsyncClient() as http, \
                http.stream("POST", url + "/v1/messages", json=asked,
                            headers={"anthropic-version": "2023-06-01"}) as answer:
            body = b"".join([piece async for piece in answer.aiter_raw()])
            return body, await tap.read()

    body, reading = asyncio.run(scenario())
    head, frames = stream_bytes(script, asked)
    assert body == head + b"".join(frames)
    assert body.count(b"event: content_block_delta\n") == script.frames
    timed_against(standin, reading, script)


def test_responses_stream_is_timed_through_the_openai_client():
    script = Script(shape="responses", first_token_seconds=0.2,
                    gaps_seconds=(0.3, 0.02, 0.1), tokens_per_frame=3)
    standin = StandIn(script)

    async def scenario() -> tuple[list[str], TapReading]:
        async with tap_before(standin) as (tap, url):
            stream = await client(url).responses.create(model=MODEL, input="hi", stream=True)
            kinds = [event.type async for event in stream]
            return kinds, await tap.read()

    kinds, reading = asyncio.run(scenario())
    assert kinds.count("response.output_text.delta") == script.frames
    assert kinds[-1] == "response.completed"
    timed_against(standin, reading, script)


def test_responses_stream_through_curl_is_timed():
    script = Script(shape="responses", gaps_seconds=(0.05,) * 3)
    standin = StandIn(script)

    async def scenario() -> tuple[bytes, TapReading]:
        async with tap_before(standin) as (tap, url):
            curl = await asyncio.create_subprocess_exec(
                "curl", "-sN", url + "/v1/responses", "-H", "Content-Type: application/json",
                "-d", json.dumps({"model": MODEL, "input": "hi", "stream": True}),
                stdout=subprocess.PIPE)
            out, _ = await curl.communicate()
            return out, await tap.read()

    out, reading = asyncio.run(scenario())
    head, frames = stream_bytes(script)
    assert out == head + b"".join(frames)
    timed_against(standin, reading, script)


# ---- 3. outcomes: only generation requests count, each once, as what it was

def test_engine_down_only_generation_streams_are_errors():
    async def scenario() -> tuple[list[int], TapReading]:
        async with tap_before(None) as (tap, url), httpx.AsyncClient() as http:
            statuses = [(await http.get(url + "/health")).status_code,
                        (await http.get(url + "/v1/models")).status_code,
                        (await http.post(url + "/v1/chat/completions",
                                         json={"model": MODEL, "stream": False})).status_code]
            with pytest.raises(openai.InternalServerError):  # the 502, to the client
                await chat_stream(url)
            return statuses, await tap.read()

    statuses, reading = asyncio.run(scenario())
    assert statuses == [502, 502, 502]
    assert reading.requests == {"ok": 0, "error": 1, "client_closed": 0, "untimed": 0}


def test_up_front_http_errors_on_streams_count_as_errors():
    async def scenario() -> TapReading:
        async with tap_before(StandIn(Script(shape="chat"))) as (tap, url):
            with pytest.raises(openai.NotFoundError):
                await client(url).chat.completions.create(
                    model="no-such-model", messages=[{"role": "user", "content": "hi"}],
                    stream=True)
            with pytest.raises(openai.BadRequestError, match="context length"):
                await client(url).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "x" * CONTEXT_BYTES}],
                    stream=True)
            with pytest.raises(openai.NotFoundError):  # not a stream: not counted
                await client(url).chat.completions.create(
                    model="no-such-model", messages=[{"role": "user", "content": "hi"}])
            async with httpx.AsyncClient() as http:  # not a generation route
                assert (await http.get(url + "/echo/x?status=404")).status_code == 404
            return await tap.read()

    reading = asyncio.run(scenario())
    assert reading.requests == {"ok": 0, "error": 2, "client_closed": 0, "untimed": 0}


def test_a_client_that_leaves_before_the_headers_is_client_closed():
    # SGLang's chat route answers once its first chunk is ready: after the prefill.
    standin = StandIn(Script(shape="chat", headers_after_seconds=3.0))

    async def scenario() -> tuple[float, TapReading]:
        async with tap_before(standin) as (tap, url):
            with pytest.raises(openai.APITimeoutError):
                await client(url, timeout=0.5).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True)
            gave_up_at = time.monotonic()
            for _ in range(40):
                if standin.aborted_at:
                    break
                await asyncio.sleep(0.05)
            return gave_up_at, await tap.read()

    gave_up_at, reading = asyncio.run(scenario())
    assert len(standin.aborted_at) == 1 and standin.aborted_at[0] - gave_up_at < 1.0
    assert reading.requests == {"ok": 0, "error": 0, "client_closed": 1, "untimed": 0}
    assert reading.active == 0


def test_a_gzip_stream_is_relayed_whole_and_counted_untimed_logged_once(caplog):
    script = Script(shape="chat", gaps_seconds=(0.02,) * 3, gzip=True)
    asked = json.dumps({"model": MODEL, "stream": True, "messages": [
        {"role": "user", "content": "hi"}]})

    async def scenario() -> tuple[list[bytes], TapReading]:
        async with tap_before(StandIn(script)) as (tap, url):
            outs = []
            for _ in range(2):
                curl = await asyncio.create_subprocess_exec(
                    "curl", "-sN", "--compressed", url + PATHS["chat"],
                    "-H", "Content-Type: application/json", "-d", asked,
                    stdout=subprocess.PIPE)
                outs.append((await curl.communicate())[0])
            return outs, await tap.read()

    with caplog.at_level(logging.WARNING, logger="exporter.daemon.tap.state"):
        outs, reading = asyncio.run(scenario())
    head, frames = stream_bytes(script, json.loads(asked))
    assert outs == [head + b"".join(frames)] * 2
    assert reading.requests == {"ok": 0, "error": 0, "client_closed": 0, "untimed": 2}
    assert reading.frames == 0 and reading.gap_buckets[-1] == ("+Inf", 0.0)
    said = [r.getMessage() for r in caplog.records if "not timed" in r.getMessage()]
    assert len(said) == 1 and "tap main" in said[0] and "gzip" in said[0]


def test_an_ollama_stream_is_untimed_and_its_non_streamed_answer_uncounted():
    async def scenario() -> tuple[bytes, TapReading]:
        async with tap_before(StandIn(Script(shape="ollama"))) as (tap, url), \
                httpx.AsyncClient() as http:
            # Ollama's API streams unless told not to.
            streamed = await http.post(url + "/api/chat", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
            await http.post(url + "/api/chat", json={
                "model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}]})
            return streamed.content, await tap.read()

    body, reading = asyncio.run(scenario())
    head, frames = stream_bytes(Script(shape="ollama"))
    assert body == head + b"".join(frames)
    assert reading.requests == {"ok": 0, "error": 0, "client_closed": 0, "untimed": 1}

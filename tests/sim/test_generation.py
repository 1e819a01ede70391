"""/generate and /v1/completions served by the scheduler, over real loopback HTTP.

Simulated time runs 50x real time here (10x where real gaps are measured), so the
owner's 64K starvation experiment takes about a second. Timing assertions compare
each frame's arrival with the simulated time at which the scheduler emitted that
token, with a generous bound for a loaded machine.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from exporter.sim.engine.scheduler import Policy
from exporter.sim.engine.state import SimEngine
from tests.daemon.engines.helpers import running_sim

SCALE = 50.0


async def frames(session: aiohttp.ClientSession, url: str, body: dict) -> list[tuple[float, dict]]:
    """Each SSE data frame with its real arrival time; [DONE] as {"done": True}."""
    seen = []
    async with session.post(url, json=body) as response:
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: "):
                payload = line[6:].strip()
                seen.append((time.monotonic(),
                             {"done": True} if payload == b"[DONE]" else json.loads(payload)))
    return seen


def generate_body(prompt_tokens: int, max_new_tokens: int) -> dict:
    return {"input_ids": list(range(prompt_tokens)), "stream": True,
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}}


@pytest.mark.parametrize("policy", ["default", "n=4"])
def test_starvation_shows_in_the_stream(policy):
    async def scenario():
        state = SimEngine(policy=Policy.named(policy), time_scale=SCALE)
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            a_task = asyncio.create_task(
                frames(session, server.url + "/generate", generate_body(2000, 10**6)))
            await asyncio.sleep(3.0 / SCALE)
            b = await frames(session, server.url + "/generate", generate_body(65536, 1))
            await asyncio.sleep(2.0 / SCALE)
            a_task.cancel()
            await asyncio.gather(a_task, return_exceptions=True)
            a, b_request = (sorted(state.scheduler.requests.values(),
                                   key=lambda r: r.arrival))
            return state, a, b_request, b

    state, a, b, b_frames = asyncio.run(scenario())
    target = {"default": 47.23, "n=4": 13.80}[policy]
    assert a.longest_gap() == pytest.approx(target, rel=0.10)  # simulated, exact
    assert b.ttft == pytest.approx(49.4, rel=0.10)
    assert [f.get("meta_info", {}).get("completion_tokens") for _, f in b_frames] == [1, None]
    assert b_frames[-1][1] == {"done": True}
    assert a.phase == "aborted"  # the client went away: the scheduler dropped A


def test_frames_leave_when_the_scheduler_emits_them():
    scale = 10.0  # the 10 s pause lasts 1 s of real time, well above a busy loop's jitter

    async def scenario():
        state = SimEngine(time_scale=scale)
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            async def paused():
                await asyncio.sleep(1.0 / scale)
                state.pause_decode(10.0)
            pause = asyncio.create_task(paused())
            seen = await frames(session, server.url + "/generate", generate_body(100, 400))
            await pause
            return state, seen

    state, seen = asyncio.run(scenario())
    (request,) = state.scheduler.requests.values()
    tokens = [f for _, f in seen if "meta_info" in f]
    assert [f["meta_info"]["completion_tokens"] for f in tokens] == list(range(1, 401))
    assert sum(len(f["output_ids"]) for f in tokens) == 400  # incremental frames
    assert request.longest_gap() == pytest.approx(10.0, abs=0.05)
    # Real gaps between frames, in simulated seconds: the pause is there, at its place.
    arrivals = [t for t, f in seen if "meta_info" in f]
    real_gaps = [(b - a) * scale for a, b in zip(arrivals, arrivals[1:], strict=False)]
    longest = max(range(len(real_gaps)), key=real_gaps.__getitem__)
    assert real_gaps[longest] == pytest.approx(10.0, abs=2.5)
    assert longest == max(range(len(request.gaps())), key=request.gaps().__getitem__)


def test_completions_stream_and_usage():
    async def scenario():
        async with running_sim(SimEngine(time_scale=SCALE)) as server, \
                aiohttp.ClientSession() as session:
            body = {"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 5, "stream": True,
                    "stream_options": {"include_usage": True}}
            streamed = await frames(session, server.url + "/v1/completions", body)
            async with session.post(server.url + "/v1/completions",
                                    json={"prompt": "hello there", "max_tokens": 3}) as r:
                whole = await r.json()
            return streamed, whole

    streamed, whole = asyncio.run(scenario())
    chunks = [f for _, f in streamed]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:5]] == [None] * 4 + ["length"]
    assert "".join(c["choices"][0]["text"] for c in chunks[:5]) == " tok" * 5
    assert chunks[5]["usage"] == {"prompt_tokens": 4, "completion_tokens": 5,
                                  "total_tokens": 9}
    assert chunks[6] == {"done": True}
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == 3
    assert whole["usage"]["prompt_tokens"] == 3  # 11 characters, 4 per token



def test_completions_usage_on_every_chunk_when_asked():
    """continuous_usage_stats, as SGLang's serving_completions.py honours it: every chunk
    carries the cumulative count (the bench's openai API relies on it)."""
    async def scenario():
        async with running_sim(SimEngine(time_scale=SCALE)) as server, \
                aiohttp.ClientSession() as session:
            body = {"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 5, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            return await frames(session, server.url + "/v1/completions", body)

    chunks = [f for _, f in asyncio.run(scenario())][:5]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    texts = [c["choices"][0]["text"].count(" tok") for c in chunks]
    assert counts == [sum(texts[:i + 1]) for i in range(5)] and counts[-1] == 5

def test_non_streaming_generate():
    async def scenario():
        async with running_sim(SimEngine(time_scale=SCALE)) as server, \
                aiohttp.ClientSession() as session:
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 7}}
            async with session.post(server.url + "/generate", json=body) as r:
                return r.status, await r.json()

    status, answer = asyncio.run(scenario())
    assert status == 200
    assert answer["meta_info"]["completion_tokens"] == 7
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 7}


def test_client_disconnect_aborts_the_request():
    async def scenario():
        state = SimEngine(time_scale=SCALE)
        async with running_sim(state) as server:
            async with aiohttp.ClientSession() as session:
                client = asyncio.create_task(frames(session, server.url + "/generate",
                                                    generate_body(65536, 10)))
                # The client goes once its request is prefilling (on a loaded machine
                # the request may take longer than any fixed wait to arrive).
                deadline = time.monotonic() + 10
                while not state.scheduler.active and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.1)
                client.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await client
            deadline = time.monotonic() + 10
            while state.scheduler.active and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            async with aiohttp.ClientSession() as session, \
                    session.get(server.url + "/metrics") as r:
                text = await r.text()
            return state, text

    state, text = asyncio.run(scenario())
    (request,) = state.scheduler.requests.values()
    assert request.phase == "aborted" and request.token_times == []
    assert 'sglang:num_aborted_requests_total{engine_type="unified"' in text


@pytest.mark.parametrize("path, body, reason", [
    ("/generate", {"sampling_params": {"max_new_tokens": 3}}, "give a prompt"),
    ("/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 0}},
     "max_new_tokens"),
    ("/generate", {"input_ids": ["a"]}, "input_ids"),
    ("/generate", {"input_ids": [1] * 300_000}, "longer than the KV pool"),
    ("/v1/completions", {"prompt": [1, 2], "max_tokens": -1}, "max_tokens"),
    ("/v1/completions", [1, 2], "JSON object"),
])
def test_bad_requests_get_400(path, body, reason):
    async def scenario():
        state = SimEngine(time_scale=SCALE)
        async with running_sim(state) as server, aiohttp.ClientSession() as session, \
                session.post(server.url + path, json=body) as r:
            return r.status, await r.json(), state

    status, answer, state = asyncio.run(scenario())
    assert status == 400
    assert reason in answer["error"]["message"]
    assert state.scheduler.requests == {}


def test_restart_drops_a_stream_without_done():
    async def scenario():
        state = SimEngine(time_scale=SCALE)
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            async def restart():
                await asyncio.sleep(0.2)
                state.restart()
            task = asyncio.create_task(restart())
            seen = await frames(session, server.url + "/generate", generate_body(10, 10**6))
            await task
            return seen

    seen = asyncio.run(scenario())
    assert seen and seen[-1][1] != {"done": True}


def test_loads_endpoint():
    async def scenario():
        answers = []
        for version in ("0.5.23", "0.5.5"):
            state = SimEngine(time_scale=SCALE, version=version)
            state.running = 2
            async with running_sim(state) as server, aiohttp.ClientSession() as session:
                for query in ("?include=core", "?include=nonsense"):
                    async with session.get(server.url + "/v1/loads" + query) as r:
                        answers.append((r.status, await r.json() if r.status != 404
                                        else None))
        return answers

    (core, bad, old, _) = asyncio.run(scenario())
    assert core[0] == 200
    assert core[1]["loads"][0]["num_running_reqs"] == 2
    assert abs(core[1]["loads"][0]["timestamp"] - time.time()) < 60
    assert bad[0] == 400
    assert old[0] == 404

"""The simulated rig speaks as agents: the engine's prefix cache, its chat API, its
stream interval, and the rig's agents named by a real exporter's tap over loopback."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from exporter.daemon.runtime import Exporter
from exporter.sim.agents import ROSTER, text_of
from exporter.sim.engine.scheduler import Policy, Scheduler, Timings
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig.simrig import SimRig
from tests.daemon.engines.helpers import running_sim
from tests.scrape import get, serving

SCALE = 50.0


def test_a_text_prompt_hits_the_prefix_a_finished_one_left_in_the_pool() -> None:
    sched = Scheduler(Policy(), start=0.0, kv_capacity_tokens=100_000)
    first = text_of("[a]", 40_000)
    one = sched.submit(40_000, 10, key=first)
    sched.run_until_true(lambda: one.done)
    assert one.cached == {}
    # The next turn: the first prompt, its answer, new input.
    again = sched.submit(40_000 + 10 + 500, 10, key=first + " tok" * 10 + text_of("[b]", 500))
    assert again.cached == {"device": 40_010}
    sched.run_until_true(lambda: again.done)
    # Another agent's prompt shares nothing, and its 70K evict the 40.5K left.
    other = sched.submit(70_000, 10, key=text_of("[c]", 70_000))
    assert other.cached == {}
    sched.run_until_true(lambda: other.done)
    assert sched.counters.evicted_tokens == 40_520
    back = sched.submit(40_600, 10, key=first + " tok" * 10 + text_of("[b]", 590))
    assert back.cached == {}  # evicted: prefilled again


def test_a_prompt_without_text_is_never_matched() -> None:
    sched = Scheduler(Policy(), start=0.0)
    one = sched.submit(1000, 1)
    sched.run_until_true(lambda: one.done)
    assert sched.submit(1000, 1, key=text_of("[a]", 1000)).cached == {}


def test_prefill_stretch_lengthens_prefill_and_admission_only() -> None:
    def ttft_and_step(stretch: float) -> tuple[float, float]:
        sched = Scheduler(Policy(), Timings(prefill_stretch=stretch), start=0.0)
        request = sched.submit(65_536, 3)
        sched.run_until_true(lambda: request.done)
        return request.ttft or 0.0, request.token_times[2] - request.token_times[1]

    (plain, step), (stretched, same_step) = ttft_and_step(1.0), ttft_and_step(5.0)
    assert stretched == pytest.approx(5 * plain, rel=0.01)
    assert same_step == pytest.approx(step)


async def _sse(session: aiohttp.ClientSession, url: str, body: dict) -> list[dict]:
    events = []
    async with session.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                events.append(json.loads(line[6:]))
    return events


def test_chat_without_a_limit_runs_to_the_context_length_and_reports_its_cache() -> None:
    async def run() -> tuple[list[dict], list[dict]]:
        state = SimEngine(time_scale=1000.0, context_len=3000, enable_cache_report=True)
        prompt = text_of("[chat]", 2000)
        body = {"messages": [{"role": "user", "content": prompt}], "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            first = await _sse(session, server.url + "/v1/chat/completions", body)
            body["messages"].append({"role": "assistant", "content": " tok" * 999})
            body["max_completion_tokens"] = 5
            second = await _sse(session, server.url + "/v1/chat/completions", body)
        return first, second

    first, second = asyncio.run(run())
    assert first[0]["object"] == "chat.completion.chunk"
    assert first[0]["choices"][0]["delta"]["role"] == "assistant"
    # 3,000 - 2,000 - 1: SGLang's init_req_max_new_tokens without a limit.
    assert first[-1]["usage"]["completion_tokens"] == 999
    assert first[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert second[-1]["usage"]["completion_tokens"] == 1  # capped by the context too
    # All of it was cached, but one token is always computed.
    assert second[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 2998}


def test_a_stream_interval_sends_the_first_token_at_once_then_every_n() -> None:
    async def run() -> list[dict]:
        state = SimEngine(time_scale=SCALE)
        body = {"text": "x" * 400, "stream": True,
                "sampling_params": {"max_new_tokens": 10, "stream_interval": 4}}
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            return await _sse(session, server.url + "/generate", body)

    counts = [e["meta_info"]["completion_tokens"] for e in asyncio.run(run())]
    assert counts == [1, 5, 9, 10]


def test_the_rigs_agents_are_named_by_the_exporters_tap_four_ways() -> None:
    async def run() -> tuple[str, set[str]]:
        async with SimRig(time_scale=SCALE, stall_scale=2.0) as rig:
            exporter = Exporter(rig.exporter_config())
            async with serving(exporter) as url:
                tasks = []
                for spec in ROSTER:
                    agent = rig.agent(spec.name)
                    agent.start_session(500)
                    tasks.append(agent.send(20))
                await asyncio.wait_for(asyncio.gather(*tasks), 20)
                outcomes = {t.outcome for spec in ROSTER for t in rig.agent(spec.name).turns}
                _, _, text = await get(url + "/metrics")
                keys = {rig.agent(spec.name).api_key for spec in ROSTER} - {None}
                assert keys and not any(key in text for key in keys if key)
                return text, outcomes

    text, outcomes = asyncio.run(run())
    assert outcomes == {"done"}
    for spec in ROSTER:
        assert (f'rig_agent_requests_total{{agent="{spec.name}",engine="main",kind="sglang",'
                f'outcome="ok"}} 1.0') in text, spec.name
    assert 'rig_agent_requests_total{agent="other",engine="main",kind="sglang",outcome="ok"} 0.0' \
        in text

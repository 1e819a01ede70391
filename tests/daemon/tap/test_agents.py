"""Agents through the tap over real loopback HTTP, on a clock the test moves: three
agents matched three ways (bearer token with the official openai client, a header,
the body's `user`) plus a stranger, and a 6 s pause of A while B waits for its first
token, blamed on B (docs/tap.md#who-starved-whom)."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import AgentConfig
from exporter.daemon.runtime import Exporter
from exporter.daemon.snapshot import Snapshot, SourceResult
from tests.daemon.tap.gated import Clock, gated_tap, until

TOKEN = "sk-analyst-7f3c9a1e55d04b2a"
AGENTS = (AgentConfig("analyst", api_key=TOKEN),
          AgentConfig("creative", header_name="X-Agent", header_value="creative"),
          AgentConfig("monitor", user="hermes-nas"))


async def consume(stream: openai.AsyncStream) -> str:
    text = []
    async for part in stream:
        text += [c.delta.content or "" for c in part.choices]
    return "".join(text)


async def post_stream(session: aiohttp.ClientSession, url: str, body: dict,
                      headers: dict[str, str]) -> bytes:
    async with session.post(url + "/v1/chat/completions", json=body,
                            headers=headers) as response:
        assert response.status == 200
        return await response.read()


def messages(key: str) -> list[dict]:
    return [{"role": "user", "content": key}]


def samples(text: str) -> dict[tuple[str, ...], float]:
    """(sample name, agent, by/outcome) -> value, for the rig_agent_* samples."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("rig_agent_"):
                extra = s.labels.get("by") or s.labels.get("outcome") or s.labels.get("le", "")
                found[(s.name, s.labels["agent"], extra)] = s.value
    return found


async def play() -> tuple[dict, dict, dict]:
    clock = Clock()
    async with gated_tap(AGENTS, clock) as (gated, tap, url), aiohttp.ClientSession() as http:
        state = tap.state
        analyst = openai.AsyncOpenAI(base_url=url + "/v1", api_key=TOKEN, max_retries=0)
        stranger = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-stranger-0000",
                                      max_retries=0)

        # The monitor, named by its body's `user`, and the stranger: done before the pause.
        monitor = await stranger.chat.completions.create(
            model="qwen", messages=messages("M"), stream=True, user="hermes-nas",
            max_tokens=64, stream_options={"include_usage": True})
        task = asyncio.create_task(consume(monitor))
        gated.tokens("M", 3)
        gated.end("M", prompt=1000, completion=3, cached=800)
        await task
        other = await stranger.chat.completions.create(
            model="qwen", messages=messages("S"), stream=True,
            stream_options={"include_usage": True})  # no max_tokens: unbounded
        task = asyncio.create_task(consume(other))
        gated.tokens("S", 2)
        gated.end("S", prompt=50, completion=2)
        await task

        # A decodes; B arrives as A's third token does; A then gets nothing for 6 s
        # while B waits for its first token; then B's first token, then A's fourth.
        a_stream = await analyst.chat.completions.create(
            model="qwen", messages=messages("A"), stream=True, max_tokens=4096,
            stream_options={"include_usage": True})
        a_task = asyncio.create_task(consume(a_stream))
        gated.tokens("A", 3)
        await until(lambda: state.frames == 3 + 2 + 3)
        b_task = asyncio.create_task(post_stream(
            http, url, {"model": "qwen", "messages": messages("B"), "stream": True,
                        "max_tokens": 512, "stream_options": {"include_usage": True}},
            {"X-Agent": "creative"}))
        await until(lambda: any(f.waiting and f.stream for f in state.flights["creative"]))
        clock.advance(6.0)
        during = tap.state.reading("sglang", "main")
        gated.tokens("B", 1)
        await until(lambda: state.frames == 9)
        gated.tokens("A", 1)
        await until(lambda: state.frames == 10)
        gated.end("A", prompt=120_000, completion=4, cached=100_000)
        gated.end("B", prompt=64_000, completion=1, cached=0)
        await a_task
        await b_task
        after = await tap.read()
        exposition = Exporter.render(Snapshot((SourceResult("tap/main", after, 0.01),)))
        return ({a.name: a for a in during.agents}, {a.name: a for a in after.agents},
                samples(exposition.decode()))


@pytest.fixture(scope="module")
def played() -> tuple[dict, dict, dict]:
    return asyncio.run(play())


def test_each_agent_named_its_own_way(played):
    _, after, families = played
    assert list(after) == ["analyst", "creative", "monitor", "other"]
    for agent in after:
        assert families[("rig_agent_requests_total", agent, "ok")] == 1
        assert families[("rig_agent_streams_active", agent, "")] == 0
        assert families[("rig_agent_longest_request_seconds", agent, "")] == 0
    assert families[("rig_agent_generated_tokens_total", "analyst", "")] == 4
    assert families[("rig_agent_generated_tokens_total", "monitor", "")] == 3
    assert families[("rig_agent_generated_tokens_total", "other", "")] == 2


def test_prompts_cache_and_unbounded(played):
    _, _, families = played
    assert families[("rig_agent_prompt_tokens_total", "analyst", "")] == 120_000
    assert families[("rig_agent_cached_prompt_tokens_total", "analyst", "")] == 100_000
    assert families[("rig_agent_last_prompt_tokens", "creative", "")] == 64_000
    assert families[("rig_agent_cached_prompt_tokens_total", "monitor", "")] == 800
    # The stranger's engine reported no cached count: absent, not an invented 0.
    assert ("rig_agent_cached_prompt_tokens_total", "other", "") not in families
    assert families[("rig_agent_last_prompt_tokens", "other", "")] == 50
    assert {a: families[("rig_agent_unbounded_requests_total", a, "")]
            for a in ("analyst", "creative", "monitor", "other")} == {
        "analyst": 0, "creative": 0, "monitor": 0, "other": 1}


def test_six_seconds_of_a_blamed_on_b(played):
    _, _, families = played
    starved = {by: families[("rig_agent_starved_seconds_total", "analyst", by)]
               for by in ("analyst", "creative", "monitor", "other", "none")}
    assert starved == {"analyst": 0, "creative": pytest.approx(6.0), "monitor": 0,
                       "other": 0, "none": 0}
    for agent in ("creative", "monitor", "other"):
        assert all(families[("rig_agent_starved_seconds_total", agent, by)] == 0
                   for by in ("analyst", "creative", "monitor", "other", "none"))
    assert families[("rig_agent_ttft_seconds_sum", "creative", "")] == pytest.approx(6.0)
    assert families[("rig_agent_max_token_gap_seconds", "analyst", "")] == pytest.approx(6.0)


def test_while_it_lasts_the_stall_is_already_blamed(played):
    during, _, _ = played
    analyst, creative = during["analyst"], during["creative"]
    assert analyst.starved_seconds["creative"] == pytest.approx(6.0)
    assert analyst.max_gap_seconds == pytest.approx(6.0)
    assert creative.longest_first_token_wait_seconds == pytest.approx(6.0)
    assert analyst.longest_first_token_wait_seconds == 0
    assert analyst.streams_active == creative.streams_active == 1
    assert [v.waiting for v in creative.in_flight] == [True]
    assert analyst.response_tokens_max == 3

"""Real vLLM (CPU, 0.32.0) under a real rig-exporter: the collector on its live
/metrics, the tap on all four generation APIs with the official openai and anthropic
clients, cached prompt tokens per agent with prefix caching, and rigctl's health and
doctor. One vLLM for the module (it takes about a minute and 4 GiB to start)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import anthropic
import openai
import pytest

from exporter.daemon.engines.stall.readers import BODY_REUSE_SECONDS
from tests.support.real_engines import CONTEXT_TOKENS, MODEL, RealEngine
from tests.support.real_rig import (
    Rig,
    agent,
    doctor_while_agents_stream,
    get,
    grown,
    openai_client,
    rigctl,
    samples,
    tap_rig,
    total,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(900)]

ALPHA = "sk-real-alpha-6d1f0c2b9e8a"
BETA = "sk-real-beta-3a7c5e1d0b94"
#: Long enough to fill several of vLLM's 128-token cache blocks.
SHARED_PREFIX = " ".join(f"rule {n}: the rig keeps its agents fed." for n in range(120))


@pytest.fixture(scope="module")
def rig(vllm_engine: RealEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with tap_rig(vllm_engine, tmp_path_factory.mktemp("rig"), "vllm", (ALPHA, BETA)) as rig:
        yield rig


def chat(client: openai.OpenAI, prompt: str, tokens: int) -> openai.types.CompletionUsage:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
    assert usage is not None
    return usage


def completion(client: openai.OpenAI, prompt: str, tokens: int) -> openai.types.CompletionUsage:
    stream = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=tokens, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
    assert usage is not None
    return usage


def response(client: openai.OpenAI, prompt: str, tokens: int):  # -> ResponseUsage
    stream = client.responses.create(model=MODEL, input=prompt, max_output_tokens=tokens,
                                     stream=True)
    done = [event for event in stream if event.type == "response.completed"]
    assert len(done) == 1
    assert done[0].response.usage is not None
    return done[0].response.usage


def message(rig: Rig, key: str, prompt: str, tokens: int) -> anthropic.types.Usage:
    client = anthropic.Anthropic(base_url=f"http://{rig.tap}", api_key=key, max_retries=0,
                                 timeout=120)
    with client.messages.stream(model=MODEL, max_tokens=tokens,
                                messages=[{"role": "user", "content": prompt}]) as stream:
        final = stream.get_final_message()
    return final.usage


def test_the_collector_reads_live_vllm_metrics_as_vllm_counts(rig: Rig) -> None:
    client = openai.OpenAI(base_url=f"{rig.engine.url}/v1", api_key="none", max_retries=0)
    chat(client, "warm the counters", 8)
    completion(client, SHARED_PREFIX, 8)
    completion(client, SHARED_PREFIX, 8)  # a prefix-cache hit
    # The stall tracker reads vLLM's /metrics too, and a scrape serves its body when it
    # is younger than BODY_REUSE_SECONDS: past that, any body served was asked for after
    # the last request ended, and holds the same counts as the engine's own answer.
    time.sleep(BODY_REUSE_SECONDS + 0.5)
    engine = samples(get(rig.engine.url + "/metrics"))
    ours = samples(get(rig.exporter.url + "/metrics"))

    assert total(ours, "rig_source_up", source="engine/main") == 1
    info = next(dict(ls) for (n, ls) in ours if n == "rig_engine_info")
    assert (info["kind"], info["version"], info["model"]) == ("vllm", "0.32.0", MODEL)
    assert total(ours, "rig_engine_context_length_tokens", engine="main") == CONTEXT_TOKENS
    for rig_family, vllm_family in (
            ("rig_engine_prompt_tokens_total", "vllm:prompt_tokens_total"),
            ("rig_engine_generation_tokens_total", "vllm:generation_tokens_total"),
            ("rig_engine_running_requests", "vllm:num_requests_running"),
            ("rig_engine_queued_requests", "vllm:num_requests_waiting"),
            ("rig_engine_kv_usage_ratio", "vllm:kv_cache_usage_perc"),
            ("rig_engine_retracted_requests_total", "vllm:num_preemptions_total"),
            ("rig_engine_time_to_first_token_seconds_count",
             "vllm:time_to_first_token_seconds_count")):
        assert total(ours, rig_family, engine="main") == total(engine, vllm_family), rig_family
    assert total(engine, "vllm:prefix_cache_hits_total") >= 128
    assert (total(ours, "rig_engine_cache_hit_tokens_total", engine="main", tier="L1")
            == total(engine, "vllm:prompt_tokens_cached_by_source_total", source="device")
            == total(engine, "vllm:prefix_cache_hits_total"))
    cache_config = next(dict(ls) for (n, ls) in engine if n == "vllm:cache_config_info")
    assert (total(ours, "rig_engine_kv_capacity_tokens", engine="main")
            == float(cache_config["kv_cache_size_tokens"]))


def test_the_tap_counts_all_four_apis_as_their_usage_says(rig: Rig) -> None:
    before = samples(get(rig.exporter.url + "/metrics"))
    alpha = openai_client(rig, ALPHA)
    usages = [chat(alpha, "one", 40), completion(alpha, "two", 50)]
    responses = response(alpha, "three", 30)
    messages = message(rig, BETA, "four", 20)
    after = samples(get(rig.exporter.url + "/metrics"))

    def grew(family: str, name: str) -> float:
        return grown(before, after, family, name)

    assert [u.completion_tokens for u in usages] == [40, 50]
    assert grew("generated_tokens_total", "alpha") == (
        sum(u.completion_tokens for u in usages) + responses.output_tokens)
    assert grew("prompt_tokens_total", "alpha") == (
        sum(u.prompt_tokens for u in usages) + responses.input_tokens)
    assert grew("generated_tokens_total", "beta") == messages.output_tokens > 0
    assert grew("prompt_tokens_total", "beta") == (
        messages.input_tokens + (messages.cache_read_input_tokens or 0))
    assert grew("requests_total", "alpha") == 3
    assert grew("requests_total", "beta") == 1
    ok = total(after, "rig_stream_requests_total", outcome="ok") - total(
        before, "rig_stream_requests_total", outcome="ok")
    assert ok == 4
    timed = total(after, "rig_stream_ttft_seconds_count") - total(
        before, "rig_stream_ttft_seconds_count")
    assert timed == 4  # each stream timed once


def test_cached_prompt_tokens_per_agent_are_what_vllm_reports(rig: Rig) -> None:
    before = samples(get(rig.exporter.url + "/metrics"))
    engine_before = samples(get(rig.engine.url + "/metrics"))
    alpha = openai_client(rig, ALPHA)
    first = chat(alpha, SHARED_PREFIX + " Alpha asks once.", 4)
    second = chat(alpha, SHARED_PREFIX + " Alpha asks twice.", 4)
    third = response(alpha, SHARED_PREFIX + " Alpha asks a third time.", 4)
    beta = message(rig, BETA, SHARED_PREFIX + " Beta asks.", 4)
    after = samples(get(rig.exporter.url + "/metrics"))
    engine_after = samples(get(rig.engine.url + "/metrics"))

    alpha_cached = [u.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
                    for u in (first, second)] + [third.input_tokens_details.cached_tokens]
    # vLLM caches whole 128-token blocks: the shared prefix is several.
    assert all(c >= 128 and c % 128 == 0 for c in alpha_cached[1:]), alpha_cached
    assert beta.cache_read_input_tokens and beta.cache_read_input_tokens >= 128
    # On /v1/messages input_tokens is the uncached part only: with the cache reads it
    # adds up to the prompt the engine counted.
    engine_prompt = (total(engine_after, "vllm:prompt_tokens_total")
                     - total(engine_before, "vllm:prompt_tokens_total"))
    assert engine_prompt == (first.prompt_tokens + second.prompt_tokens + third.input_tokens
                             + beta.input_tokens + beta.cache_read_input_tokens)

    def grew(family: str, name: str) -> float:
        return grown(before, after, family, name)

    assert grew("cached_prompt_tokens_total", "alpha") == sum(alpha_cached)
    assert grew("cached_prompt_tokens_total", "beta") == beta.cache_read_input_tokens
    engine_cached = (total(engine_after, "vllm:prompt_tokens_cached_total")
                     - total(engine_before, "vllm:prompt_tokens_cached_total"))
    assert engine_cached == sum(alpha_cached) + beta.cache_read_input_tokens
    assert agent(after, "last_prompt_tokens", "beta") == (
        beta.input_tokens + beta.cache_read_input_tokens)


def test_rigctl_health_reads_the_vllm_rig(rig: Rig) -> None:
    ended = rigctl("health", "--exporter", rig.exporter.url, "--json")
    report = json.loads(ended.stdout)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert report["status"] == "ok", ended.stdout


def test_rigctl_probe_times_a_vllm_stream(rig: Rig) -> None:
    ended = rigctl("probe", "--engine", rig.engine.url, "--kind", "vllm",
                   "--max-new-tokens", "24")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert f"probe {rig.engine.url}: ok" in ended.stdout
    tokens = next(line for line in ended.stdout.splitlines() if "tokens  " in line)
    assert tokens.split()[-1] == "24", ended.stdout


def test_rigctl_doctor_judges_the_vllm_rig_while_agents_stream(rig: Rig) -> None:
    ended, statuses = doctor_while_agents_stream(rig, ALPHA, streams=6)
    assert statuses[("engines", "rig")][0] == "ok", ended.stdout
    assert statuses[("engine_version", "main")][0] == "ok", ended.stdout
    assert "vllm" in statuses[("engine_version", "main")][1]
    assert statuses[("decode_progress", "main")][0] == "ok", ended.stdout
    assert "the doctor's probe got 32 tokens" in statuses[("decode_progress", "main")][1]
    assert statuses[("tap_bypass", "main")][0] in {"ok", "skip"}, ended.stdout
    assert not [k for k, (status, _) in statuses.items() if status == "fail"], ended.stdout

"""The llama_engine fixture itself: a real llama-server on the tiny GGUF serves
streams with usage, its /metrics, /slots and /props, and takes the flags a test gives
it (the engine-kind and bench tests build on this fixture)."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from tests.support.real_engines import CONTEXT_TOKENS, MODEL, RealEngine

pytestmark = pytest.mark.real_engine


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize(("llama_engine", "slots"), [((), 4), (("-b", "512", "-np", "2"), 2)],
                         indirect=["llama_engine"], ids=["defaults", "b512-np2"])
def test_llama_server_serves_the_tiny_model_with_the_flags_given(
        llama_engine: RealEngine, slots: int) -> None:
    client = openai.OpenAI(base_url=f"{llama_engine.url}/v1", api_key="none", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=16,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
    assert usage is not None and usage.completion_tokens == 16

    props = get_json(llama_engine.url + "/props")
    assert isinstance(props, dict)
    assert props["total_slots"] == slots
    assert props["default_generation_settings"]["n_ctx"] == CONTEXT_TOKENS
    slot_list = get_json(llama_engine.url + "/slots")
    assert isinstance(slot_list, list) and len(slot_list) == slots
    with urllib.request.urlopen(llama_engine.url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert "llamacpp:tokens_predicted_total 16" in metrics

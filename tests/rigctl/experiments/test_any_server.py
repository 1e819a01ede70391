"""rigctl bench and probe against stand-ins of every engine kind, over real HTTP.

Each stand-in streams in the shape of one real engine (tests/rigctl/experiments/standin.py):
what the bench reads of the engine, and what its token counts come from, are
asserted per shape, through the command line where the exit status matters.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from exporter.rigctl.commands.probe import probe_once
from exporter.rigctl.experiments.engine import Overrides
from exporter.rigctl.experiments.starvation import StarvationSettings, run_starvation
from exporter.rigctl.experiments.sweep import SweepSettings, run_sweep
from tests.rigctl.experiments.standin import B_TTFT, CONTEXT_LENGTH, PAUSE, VOCAB_SIZE, StandIn

pytestmark = pytest.mark.long_running(30)

REPO = Path(__file__).resolve().parents[3]
# What each shape's streams give, and the kind the bench reads it as.
EXPECTED = {
    "sglang": ("sglang", "continuous_usage"),
    "vllm": ("vllm", "continuous_usage"),
    "llamacpp": ("llamacpp", "final_usage"),
    "proxy": ("openai", "frames"),
}
SLACK = 0.25  # seconds: a loaded box's scheduling around the scripted pause


@asynccontextmanager
async def serving(style: str) -> AsyncIterator[tuple[str, StandIn]]:
    standin = StandIn(style)
    server = TestServer(standin.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), standin
    finally:
        await server.close()


async def rigctl(*args: str) -> tuple[int, str, str]:
    """The real command line, while the stand-in serves on this loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter.rigctl", *args, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def starvation(style: str, **settings) -> tuple[dict, StandIn]:
    async def run():
        async with serving(style) as (url, standin):
            result = await run_starvation(StarvationSettings(
                engine=url, context_tokens=64, delay_seconds=0.3, a_max_tokens=2000,
                **settings))
            return result.as_json(), standin

    return asyncio.run(run())


@pytest.mark.parametrize("style", list(EXPECTED))
def test_starvation_on_each_engine_shape(style: str) -> None:
    # Only the proxy says nothing of its vocabulary.
    overrides = Overrides(vocab_size=VOCAB_SIZE) if style == "proxy" else Overrides()
    result, standin = starvation(style, overrides=overrides)
    assert 0 < standin.highest_id < VOCAB_SIZE and standin.out_of_vocabulary == 0
    kind, counted = EXPECTED[style]
    assert (result["engine_kind"], result["tokens_from"]) == (kind, counted)
    assert result["api"] == ("sglang" if style == "sglang" else "openai")
    # Gaps and TTFT need no count: they are right whatever the stream says.
    assert result["a_max_gap_seconds"] == pytest.approx(PAUSE, abs=SLACK)
    assert result["b_ttft_seconds"] == pytest.approx(B_TTFT, abs=SLACK)
    assert result["a_frames_per_second_before_b"] > 10
    if counted == "continuous_usage":
        assert result["a_tokens_per_second_before_b"] > 10
        if style != "sglang":  # every tenth frame carries two tokens
            assert (result["a_tokens_per_second_before_b"]
                    > result["a_frames_per_second_before_b"])
    else:  # never a token rate made of frames
        assert result["a_tokens_per_second_before_b"] is None
        assert result["a_tokens_per_second_during_b"] is None
    if counted == "final_usage":  # B's stream ended, with the engine's count of its prompt
        assert result["b_prompt_tokens"] == 64
    if style != "sglang":
        assert standin.stream_options[0] == {"include_usage": True,
                                             "continuous_usage_stats": True}
    assert standin.open_streams == 0


@pytest.mark.parametrize("style", ["vllm", "llamacpp"])
def test_context_length_is_read_from_the_engine(style: str) -> None:
    async def run():
        async with serving(style) as (url, _):
            return await rigctl("bench", "starvation", "--engine", url,
                                "--context-tokens", str(CONTEXT_LENGTH))

    code, _, err = asyncio.run(run())
    assert code == 3
    assert f"exceeds the engine's context length ({CONTEXT_LENGTH})" in err
    assert len(err.strip().splitlines()) == 1


def test_proxy_takes_its_context_length_from_the_flag() -> None:
    async def run():
        async with serving("proxy") as (url, standin):
            refused = await rigctl("bench", "starvation", "--engine", url,
                                   "--context-tokens", "64", "--context-length", "32")
            return refused, standin.requests

    (code, _, err), requests = asyncio.run(run())
    assert code == 3 and "context length (32)" in err
    assert requests == 0  # refused before anything was sent


@pytest.mark.parametrize("style", ["sglang", "vllm"])
def test_the_vocabulary_is_found_by_the_engines_tokenizer(style: str) -> None:
    """SGLang and vLLM do not say their vocabulary; their /tokenize gives ids that exist,
    and the prompts stay below the highest (SGLang dies of an id outside it, vLLM
    refuses it): no flag needed."""
    async def run():
        async with serving(style) as (url, standin):
            ended = await rigctl("bench", "starvation", "--engine", url, "--context-tokens",
                                 "2000", "--delay", "0.2", "--a-max-tokens", "500", "--json")
            return ended, standin

    (code, out, err), standin = asyncio.run(run())
    assert code == 0, err
    assert "/tokenize" in json.dumps(json.loads(out))  # a fact source the report names
    assert standin.out_of_vocabulary == 0
    # 2,000 random ids from a range the tokenizer's ids fill nearly to the top.
    assert VOCAB_SIZE * 0.9 < standin.highest_id < VOCAB_SIZE


@pytest.mark.parametrize("style", ["proxy", "sglang-proxy"])
def test_without_a_vocabulary_the_bench_names_the_flag_before_it_sends(style: str) -> None:
    async def run():
        async with serving(style) as (url, standin):
            ended = await rigctl("bench", "starvation", "--engine", url, "--context-tokens",
                                 "64", "--delay", "0.2", "--a-max-tokens", "500")
            return ended, standin.requests

    (code, _, err), requests = asyncio.run(run())
    assert code == 3 and "give --vocab-size" in err, err
    assert len(err.strip().splitlines()) == 1
    assert requests == 0  # refused before anything was sent


def test_llamacpp_vocabulary_is_read_so_its_prompts_are_accepted() -> None:
    """llama.cpp says n_vocab in /v1/models; no flag is needed (the stand-in refuses
    any id outside it, as llama-server does)."""
    result, standin = starvation("llamacpp")
    assert result["b_ttft_seconds"] is not None and standin.requests == 2


def test_sglang_proxy_with_openai_api_measured_from_frames() -> None:
    """A proxy in front of SGLang: its facts answer, the stream through the proxy counts nothing.
    It used to exit 2 ("the stream does not count its tokens")."""
    async def run():
        async with serving("sglang-proxy") as (url, _):
            return await rigctl("bench", "starvation", "--engine", url, "--api", "openai",
                                "--context-tokens", "64", "--delay", "0.3",
                                "--a-max-tokens", "2000", "--vocab-size", str(VOCAB_SIZE),
                                "--json")

    code, out, err = asyncio.run(run())
    assert code == 0, err
    result = json.loads(out)
    assert result["tokens_from"] == "frames" and result["engine_kind"] == "sglang"
    assert result["a_max_gap_seconds"] == pytest.approx(PAUSE, abs=SLACK)
    assert result["a_tokens_per_second_before_b"] is None
    assert "rates in frames/s" in err


@pytest.mark.parametrize("style", ["vllm", "llamacpp", "proxy"])
def test_sweep_on_each_engine_shape(style: str) -> None:
    async def run():
        async with serving(style) as (url, _):
            return await run_sweep(SweepSettings(
                engine=url, concurrency=(1, 2), context_tokens=64, max_new_tokens=40,
                overrides=Overrides(vocab_size=VOCAB_SIZE)))

    result = asyncio.run(run())
    counted = EXPECTED[style][1]
    assert result.tokens_from == counted
    for point in result.points:
        assert point.tokens_from == counted
        assert point.itl_p50_seconds == pytest.approx(0.02, abs=0.05)
        assert point.decode_frames_per_second > 0
        if counted == "frames":
            assert point.completion_tokens is None and point.decode_tokens_per_second is None
        else:
            assert point.completion_tokens == 40 * point.concurrency
        if counted == "continuous_usage":
            assert point.decode_tokens_per_second > point.decode_frames_per_second
        else:
            assert point.decode_tokens_per_second is None


@pytest.mark.parametrize("style", list(EXPECTED))
def test_probe_on_each_engine_shape(style: str) -> None:
    async def run():
        async with serving(style) as (url, standin):
            return await probe_once(url, 30, 10.0, ""), standin

    result, standin = asyncio.run(run())
    assert standin.tokenize_calls == 0  # a probe sends no random ids: no range to find
    assert result.success, result.reason
    assert result.tokens_from == EXPECTED[style][1]
    assert result.frames > 0
    assert result.tokens == (None if style == "proxy" else 30)


def test_compare_two_engines_side_by_side(tmp_path: Path) -> None:
    """One run on a vLLM-shaped engine, one on a llama.cpp-shaped one, figure by figure."""
    out = tmp_path / "ab.jsonl"

    async def run():
        async with serving("vllm") as (first, _), serving("llamacpp") as (second, _):
            live = await rigctl("bench", "starvation", "--engine", first, "--compare", second,
                                "--label", "vllm", "--context-tokens", "64", "--delay", "0.3",
                                "--a-max-tokens", "2000", "--vocab-size", str(VOCAB_SIZE),
                                "--out", str(out))
            saved = await rigctl("bench", "report", str(out), "--compare", "vllm",
                                 f"vllm ({second})")
            return live, saved

    (code, live, err), (saved_code, saved, _) = asyncio.run(run())
    assert code == 0, err
    rows = {line.split("  ")[0]: line for line in live.splitlines()}
    assert "A max gap s" in rows and "B TTFT s" in rows
    assert rows["tokens from"].split()[-2:] == ["continuous_usage", "final_usage"]
    assert "tok/s" in rows["A rate before B"] and "fr/s" in rows["A rate before B"]
    assert saved_code == 0 and saved == live
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["engine_kind"] for r in records] == ["vllm", "llamacpp"]


def test_b_on_another_engine_leaves_a_undisturbed() -> None:
    """Two single-card engines: B's prefill on the second never pauses A on the first."""
    async def run():
        async with serving("vllm") as (first, a_engine), serving("vllm") as (second, b_engine):
            result = await run_starvation(StarvationSettings(
                engine=first, b_engine=second, context_tokens=64, delay_seconds=0.3,
                a_max_tokens=2000, overrides=Overrides(vocab_size=VOCAB_SIZE)))
            return result, a_engine.requests, b_engine.requests

    result, a_requests, b_requests = asyncio.run(run())
    assert (a_requests, b_requests) == (1, 1)
    assert result.b_engine is not None and result.b_engine != result.engine
    assert result.a_max_gap_seconds < PAUSE / 2


def test_report_compare_names_a_missing_label(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps({"experiment": "starvation", "label": "tp2"}) + "\n")

    async def run():
        return await rigctl("bench", "report", str(out), "--compare", "tp2", "two-cards")

    code, _, err = asyncio.run(run())
    assert code == 3 and "no result labelled 'two-cards' (labels: tp2)" in err

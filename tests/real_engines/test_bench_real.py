"""rigctl bench and probe against the real vLLM and llama-server (the real-engine tier).

The starvation experiment runs twice on each engine, with the flag that decides how
a long prefill interleaves with decode varied, and A's longest gap must follow the
flag as on the owner's rig (docs/rigctl.md#the-owners-table-on-the-real-engines):
vLLM with chunked prefill off stops A for the whole 8K prefill, with 512-token
chunks only for a chunk's step; llama.cpp's `-b 2048` stops A longer than `-b 512`.
Each engine's facts are read from what it serves, and its counts are asserted:
vLLM counts every chunk, llama.cpp only its last. Neither run gives --vocab-size: the
bench finds the ids each accepts by itself (vLLM's /tokenize, llama.cpp's n_vocab),
and llama.cpp's /tokenize is held to its n_vocab.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from exporter.daemon.engines.probe import ProbeResult
from exporter.rigctl.commands.probe import probe_once
from exporter.rigctl.experiments.engine import tokenizer_id_limit
from tests.support.real_engines import CONTEXT_TOKENS, RealEngine, llama_server, vllm_server

pytestmark = pytest.mark.real_engine

REPO = Path(__file__).resolve().parents[2]
# The tiny models' vocabulary (tests/real_engines/tiny_models.py).
VOCAB_SIZE = 4096
# B's fresh prompt: seconds of prefill on one CPU thread, and A's context and answer
# beside it within the 32K context: the shape of the owner's 64K experiment, small.
B_PROMPT = 16384
A_CONTEXT = 256
A_MAX_TOKENS = 16000


def bench(engine: RealEngine, label: str, out: Path, *extra: str) -> dict:
    """One starvation run through the command line; its result is also appended to
    `out`, whose report the test prints (pytest -s shows the table)."""
    done = subprocess.run(
        [sys.executable, "-m", "exporter.rigctl", "bench", "starvation", "--engine", engine.url,
         "--context-tokens", str(B_PROMPT), "--a-context-tokens", str(A_CONTEXT),
         "--a-max-tokens", str(A_MAX_TOKENS), "--delay", "3", "--label", label, "--json",
         "--out", str(out), *extra],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def print_report(out: Path) -> None:
    report = subprocess.run([sys.executable, "-m", "exporter.rigctl", "bench", "report",
                             str(out)], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    print(report.stdout)


# Two vLLM starts (41-73 s each quiet, 200-260 s on a busy box) and two runs.
@pytest.mark.timeout(1800)
def test_vllm_starvation_follows_chunked_prefill(tmp_path: Path) -> None:
    results = {}
    for label, flags in (("chunks of 512", ("--max-num-batched-tokens", "512")),
                         ("chunked prefill off", ("--no-enable-chunked-prefill",
                                                  "--max-num-batched-tokens", "32768"))):
        with vllm_server(flags, tmp_path) as engine:
            # No --vocab-size: vLLM refused an id past its 4,096 with HTTP 400 before
            # the bench asked its /tokenize.
            results[label] = bench(engine, label, tmp_path / "vllm.jsonl")
            if label == "chunks of 512":
                probe = _probe(engine)
                assert probe.success, probe.reason
                assert probe.tokens_from == "continuous_usage" and probe.tokens == 16
    for result in results.values():
        assert result["engine_kind"] == "vllm" and result["api"] == "openai"
        assert result["context_length_tokens"] == CONTEXT_TOKENS
        assert result["engine_flags"]["enable_prefix_caching"] == "True"
        assert result["tokens_from"] == "continuous_usage"
        assert result["a_tokens_per_second_before_b"] > 0
        assert result["b_ttft_seconds"] > 0
        assert result["token_ids_from"] == "/tokenize"
        assert 1000 < result["token_id_limit"] <= VOCAB_SIZE
    print_report(tmp_path / "vllm.jsonl")
    chunked = results["chunks of 512"]["a_max_gap_seconds"]
    whole = results["chunked prefill off"]["a_max_gap_seconds"]
    # The whole prefill in one step stops A for all of it; a 512-token chunk for a step.
    assert whole > 2 * chunked, results
    assert whole > 0.5 * results["chunked prefill off"]["b_ttft_seconds"], results


@pytest.mark.timeout(900)
def test_llamacpp_starvation_follows_the_batch_size(tmp_path: Path) -> None:
    results = {}
    for label, flags in (("-b 512", ("-b", "512")), ("-b 2048", ("-b", "2048", "-ub", "2048"))):
        with llama_server(flags, tmp_path) as engine:
            # No --vocab-size: llama-server says n_vocab in /v1/models.
            results[label] = bench(engine, label, tmp_path / "llamacpp.jsonl")
            if label == "-b 512":
                probe = _probe(engine)
                assert probe.success, probe.reason
                assert probe.tokens_from == "final_usage" and probe.tokens == 16
                # Where n_vocab were not said, llama.cpp's /tokenize would serve.
                limit = asyncio.run(_tokenized_limit(engine.url))
                assert limit is not None and 1000 < limit <= VOCAB_SIZE
    for result in results.values():
        assert result["engine_kind"] == "llamacpp" and result["api"] == "openai"
        assert result["context_length_tokens"] == CONTEXT_TOKENS
        # llama.cpp ignores continuous_usage_stats: rates in frames, B's prompt counted.
        assert result["tokens_from"] == "final_usage"
        assert result["a_tokens_per_second_before_b"] is None
        assert result["a_frames_per_second_before_b"] > 0
        assert result["b_prompt_tokens"] == B_PROMPT
        assert result["token_ids_from"] == "/v1/models"
        assert result["token_id_limit"] == VOCAB_SIZE
    print_report(tmp_path / "llamacpp.jsonl")
    assert (results["-b 2048"]["a_max_gap_seconds"]
            > 1.5 * results["-b 512"]["a_max_gap_seconds"]), results


async def _tokenized_limit(url: str) -> int | None:
    async with aiohttp.ClientSession() as session:
        return await tokenizer_id_limit(session, url, "llamacpp")


def _probe(engine: RealEngine) -> ProbeResult:
    return asyncio.run(probe_once(engine.url, 16, 60.0, ""))

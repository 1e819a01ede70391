"""The engine under test: its identity and flags, and how to ask it for a stream."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import aiohttp

from exporter.engines.info import SGLANG_INFO_PATHS

APIS = ("sglang", "openai")
# SGLang's server_info keys that decide how prefill and decode interleave.
SCHEDULER_FLAGS = ("chunked_prefill_size", "enable_mixed_chunk",
                   "max_consecutive_prefill_batches", "prefill_decode_interval",
                   "schedule_policy", "max_running_requests", "enable_hierarchical_cache",
                   "speculative_algorithm")


class EngineRefused(Exception):
    """The experiment cannot run against this engine; str() is the one line to print."""


@dataclass(frozen=True)
class EngineFacts:
    version: str
    max_total_num_tokens: int | None
    flags: dict[str, Any]


async def engine_facts(session: aiohttp.ClientSession, url: str) -> EngineFacts:
    """Read /server_info (or /get_server_info); EngineRefused when the engine does not answer."""
    errors = []
    for path in SGLANG_INFO_PATHS:
        try:
            async with session.get(url + path, timeout=aiohttp.ClientTimeout(total=10)) as r:
                if r.status != 200:
                    errors.append(f"{path}: HTTP {r.status}")
                    continue
                info = json.loads(await r.text())
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            errors.append(f"{path}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(info, dict):
            return _facts(info)
        errors.append(f"{path}: not a JSON object")
    raise EngineRefused(f"engine {url} not reachable: {'; '.join(errors)}")


def _facts(info: dict[str, Any]) -> EngineFacts:
    tokens = info.get("max_total_num_tokens")
    if tokens is None:  # newer SGLang nests the schedulers' values
        for scheduler in info.get("internal_states") or []:
            if isinstance(scheduler, dict) and "max_total_num_tokens" in scheduler:
                tokens = scheduler["max_total_num_tokens"]
                break
    return EngineFacts(
        version=str(info.get("version", "")),
        max_total_num_tokens=int(tokens) if isinstance(tokens, int | float) else None,
        flags={key: info[key] for key in SCHEDULER_FLAGS if key in info},
    )


def check_context(facts: EngineFacts, tokens: int, what: str) -> None:
    if facts.max_total_num_tokens is not None and tokens > facts.max_total_num_tokens:
        raise EngineRefused(f"{what} of {tokens} tokens exceeds the engine's KV pool "
                            f"(max_total_num_tokens {facts.max_total_num_tokens})")


def random_prompt(tokens: int, rng: random.Random) -> list[int]:
    """Random token ids: no prefix is shared with anything cached, so no cache hit."""
    return [rng.randrange(1000, 30000) for _ in range(tokens)]


def stream_request(api: str, prompt: list[int], max_new_tokens: int) -> tuple[str, dict]:
    """(path, JSON body) of a streamed generation that ignores EOS, so its length is known."""
    if api == "sglang":
        return "/generate", {
            "input_ids": prompt, "stream": True,
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True,
                                "temperature": 0},
        }
    return "/v1/completions", {
        "prompt": prompt, "stream": True, "max_tokens": max_new_tokens, "temperature": 0,
        # Usage on every chunk: a chunk may carry several tokens (speculative decoding),
        # and only the engine's count says how many (SGLang and vLLM both honour it).
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }

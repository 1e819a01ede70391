"""The streamed generation request each API takes, for the probe and the bench.

- `sglang`: SGLang's native `/generate`; its frames count their tokens
  (`meta_info.completion_tokens`), so a gap and a rate are exact.
- `openai`: `/v1/completions`, which SGLang, vLLM and llama.cpp's `llama-server`
  all serve. It asks for the usage on every chunk (`continuous_usage_stats`: SGLang
  and vLLM honour it) and on the last (`include_usage`: llama.cpp ignores the
  first and honours only this, putting the usage on its `finish_reason` frame).
  A server or proxy that honours neither still streams frames; what the count came
  from is the stream meter's `tokens_from` (docs/rigctl.md#where-the-token-counts-come-from).

`ignore_eos` keeps the answer's length known: SGLang's native sampling_params,
vLLM's and llama.cpp's extra completion parameter.
"""

from __future__ import annotations

from typing import Any

APIS = ("sglang", "openai")


def api_for(kind: str) -> str:
    """The API a kind of engine is asked in: SGLang's own, else OpenAI's (vLLM has no
    /generate; llama.cpp's native /completion counts differently)."""
    return "sglang" if kind == "sglang" else "openai"


def generation_request(api: str, prompt: str | list[int],
                       max_new_tokens: int) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of a streamed, greedy generation of exactly `max_new_tokens`;
    the prompt is text or token ids."""
    if api == "sglang":
        key = "text" if isinstance(prompt, str) else "input_ids"
        return "/generate", {
            key: prompt, "stream": True,
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True,
                                "temperature": 0},
        }
    if api != "openai":
        raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    return "/v1/completions", {
        "prompt": prompt, "stream": True, "max_tokens": max_new_tokens, "temperature": 0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }

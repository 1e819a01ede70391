"""A stand-in engine with a scripted pause, in the shapes real engines stream.

The first stream (A) gets a frame every `GAP` seconds. When a second request (B)
arrives, A gets nothing for `PAUSE` seconds, and B's first frame comes `B_TTFT`
seconds after it was sent. Every `DOUBLE_EVERY`-th frame of the OpenAI styles
carries two tokens, as real engines' frames do (vLLM under load; llama.cpp holding
back partial UTF-8), so frames and tokens differ.

Its facts and streams follow one engine each (the shapes of the captures in
docs/rigctl.md#where-the-token-counts-come-from):
- `sglang`: `/server_info`, `/tokenize`; `/generate` native frames; `/v1/completions`
  with usage on every chunk when asked. SGLang 0.5.23 checks no prompt id against its
  vocabulary and its scheduler dies of one outside it: the stand-in drops the
  connection and counts it (`out_of_vocabulary`).
- `vllm`: `/v1/models` (`max_model_len`), `/version`, `/metrics` with
  `vllm:cache_config_info`, `/tokenize`; `/v1/completions` honours
  `continuous_usage_stats` (usage on every chunk) and `include_usage` (a `choices: []`
  usage chunk), and refuses a token id outside its vocabulary with HTTP 400, as vLLM does.
- `llamacpp`: `/props`, `/v1/models` with `meta.n_vocab`; `/v1/completions` ignores
  `continuous_usage_stats`, puts the usage (and `timings`) on its `finish_reason`
  frame with `include_usage`, and refuses an id outside its vocabulary.
- `proxy`: an OpenAI-compatible proxy: `/v1/models` with an id only; no usage ever,
  no tokenizer.
- `sglang-proxy`: the same proxy in front of SGLang, passing `/server_info` through
  (and not `/tokenize`): what `rigctl bench --api openai` refused before it measured
  from frames.

Every stand-in that knows its vocabulary notes the highest prompt id it was sent
(`highest_id`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

GAP = 0.02
PAUSE = 1.0
B_TTFT = 1.2
MAX_TOTAL_NUM_TOKENS = 100_000
CONTEXT_LENGTH = 32_768
VOCAB_SIZE = 4096
DOUBLE_EVERY = 10
STYLES = ("sglang", "vllm", "llamacpp", "proxy", "sglang-proxy")


class StandIn:
    def __init__(self, style: str = "sglang") -> None:
        assert style in STYLES, style
        self.style = style
        self.requests = 0
        self.open_streams = 0
        self.b_arrived: asyncio.Event | None = None
        self.b_arrived_at = 0.0
        #: The stream_options of every generation request, in order.
        self.stream_options: list[Any] = []
        self.highest_id = -1
        self.out_of_vocabulary = 0
        self.tokenize_calls = 0

    def app(self) -> web.Application:
        app = web.Application()
        routes = {
            "sglang": [("/server_info", self.server_info), ("/generate", None),
                       ("/tokenize", self.tokenize)],
            "sglang-proxy": [("/server_info", self.server_info)],
            "vllm": [("/v1/models", self.models), ("/version", self.version),
                     ("/metrics", self.metrics), ("/tokenize", self.tokenize)],
            "llamacpp": [("/props", self.props), ("/v1/models", self.models)],
            "proxy": [("/v1/models", self.models)],
        }[self.style]
        for path, handler in routes:
            if handler is None:
                app.router.add_post(path, self.generate)
            elif path == "/tokenize":
                app.router.add_post(path, handler)
            else:
                app.router.add_get(path, handler)
        app.router.add_post("/v1/completions", self.generate)
        return app

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "stand-in", "chunked_prefill_size": 8192,
                                  "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS})

    async def models(self, request: web.Request) -> web.Response:
        model: dict[str, Any] = {"id": "tiny", "object": "model", "owned_by": self.style}
        if self.style == "vllm":
            model["max_model_len"] = CONTEXT_LENGTH
        elif self.style == "llamacpp":
            model["meta"] = {"vocab_type": 2, "n_vocab": VOCAB_SIZE, "n_ctx": CONTEXT_LENGTH,
                             "n_ctx_train": CONTEXT_LENGTH}
        return web.json_response({"object": "list", "data": [model]})

    async def tokenize(self, request: web.Request) -> web.Response:
        """As SGLang's and vLLM's /tokenize of a `prompt`: ids of the words, the lowest
        past the specials, all within the vocabulary."""
        self.tokenize_calls += 1
        words = (await request.json())["prompt"].split()
        tokens = [3 + sum(word.encode()) * 7 % (VOCAB_SIZE - 3) for word in words]
        return web.json_response({"tokens": tokens, "count": len(tokens),
                                  "max_model_len": CONTEXT_LENGTH})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=(
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            'vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",'
            'kv_cache_size_tokens="524288"} 1.0\n'))

    async def props(self, request: web.Request) -> web.Response:
        return web.json_response({
            "default_generation_settings": {"params": {"n_predict": -1}, "n_ctx": CONTEXT_LENGTH},
            "total_slots": 4, "model_alias": "tiny.gguf", "build_info": "b1-0c1e570"})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        openai = request.path.startswith("/v1/")
        wanted = body["max_tokens"] if openai else body["sampling_params"]["max_new_tokens"]
        prompt = body.get("prompt") if openai else body.get("input_ids")
        if isinstance(prompt, list) and prompt:
            self.highest_id = max(self.highest_id, max(prompt))
        if (self.style in ("vllm", "llamacpp", "sglang") and isinstance(prompt, list)
                and max(prompt) >= VOCAB_SIZE):
            self.out_of_vocabulary += 1
            if self.style == "sglang":  # its scheduler dies: the stream is cut
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)
            return web.json_response({"error": {"message": "Prompt contains invalid tokens",
                                                "code": 400}}, status=400)
        options = body.get("stream_options") or {}
        self.stream_options.append(options)
        self.requests += 1
        loop = asyncio.get_running_loop()
        if self.b_arrived is None:
            self.b_arrived = asyncio.Event()
        is_b = self.requests == 2
        if is_b:
            self.b_arrived_at = loop.time()
            self.b_arrived.set()
        frames = _Frames(self.style if openai else "native", options,
                         len(prompt) if isinstance(prompt, list) else 0)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.open_streams += 1
        try:
            tokens = 0
            while tokens < wanted:
                if is_b and tokens == 0:
                    await asyncio.sleep(B_TTFT)
                else:
                    await asyncio.sleep(GAP)
                    if not is_b and self.b_arrived.is_set():
                        resume_at = self.b_arrived_at + PAUSE
                        if loop.time() < resume_at:
                            await asyncio.sleep(resume_at - loop.time())
                step = 2 if openai and frames.count % DOUBLE_EVERY == DOUBLE_EVERY - 1 else 1
                tokens = min(wanted, tokens + step)
                await response.write(frames.token(tokens))
            await response.write(frames.end(tokens))
        finally:
            self.open_streams -= 1
        return response


class _Frames:
    """The bytes of one stream's frames, in one engine's shape."""

    def __init__(self, style: str, options: dict[str, Any], prompt_tokens: int) -> None:
        self.style = style
        self.count = 0
        self.prompt_tokens = prompt_tokens
        self.continuous = style in ("vllm", "sglang") and bool(
            options.get("continuous_usage_stats"))
        self.final = style in ("vllm", "llamacpp", "sglang") and bool(
            options.get("include_usage"))

    def usage(self, tokens: int) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + tokens,
                "completion_tokens": tokens}

    def token(self, tokens: int) -> bytes:
        self.count += 1
        if self.style == "native":
            return _data({"text": "x" * tokens, "meta_info": {"completion_tokens": tokens}})
        chunk: dict[str, Any] = {"id": "cmpl-standin", "object": "text_completion",
                                 "model": "tiny", "choices": [{"index": 0, "text": "xy",
                                                               "logprobs": None,
                                                               "finish_reason": None}]}
        if self.continuous:
            chunk["usage"] = self.usage(tokens)
        return _data(chunk)

    def end(self, tokens: int) -> bytes:
        if self.style == "native":
            return b"data: [DONE]\n\n"
        frames = b""
        if self.style == "llamacpp":
            # llama.cpp's last frame: no text, the finish reason, and with include_usage
            # the usage and its timings.
            last: dict[str, Any] = {"choices": [{"text": "", "index": 0, "logprobs": None,
                                                 "finish_reason": "length"}],
                                    "object": "text_completion"}
            if self.final:
                last["usage"] = {**self.usage(tokens),
                                 "prompt_tokens_details": {"cached_tokens": 0}}
                last["timings"] = {"cache_n": 0, "prompt_n": self.prompt_tokens,
                                   "predicted_n": tokens}
            frames += _data(last)
        elif self.final:
            frames += _data({"id": "cmpl-standin", "object": "text_completion",
                             "model": "tiny", "choices": [], "usage": self.usage(tokens)})
        return frames + b"data: [DONE]\n\n"


def _data(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body)}\n\n".encode()

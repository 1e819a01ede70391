"""A stand-in engine for the tap tests: streams a scripted gap pattern in the shapes the
rig sees (SGLang native /generate, OpenAI chat and completions SSE, Anthropic Messages,
OpenAI Responses, Ollama NDJSON), answers non-streaming requests, refuses a model it
does not serve (404) and a prompt longer than its context (400) with JSON as SGLang
and vLLM do, lists models, echoes any request, and notes when a client's stream was
aborted.

The shapes follow sglang 0.5.23's writers (http_server.py `stream_results`,
serving_chat.py, anthropic/serving.py `_wrap_sse_event`, serving_responses.py
`_send_event`, ollama/serving.py); each frame carries `tokens_per_frame` tokens, as
a decode step of speculative decoding does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web

from exporter.config import EngineConfig
from exporter.daemon.tap.source import TapSource
from exporter.process.launch import free_port

MODEL = "qwen"
#: Bytes of prompt the stand-in takes; longer is "longer than the context" (400).
CONTEXT_BYTES = 10_000
PATHS = {"native": "/generate", "chat": "/v1/chat/completions",
         "completions": "/v1/completions", "messages": "/v1/messages",
         "responses": "/v1/responses", "ollama": "/api/chat"}
SHAPES = {path: shape for shape, path in PATHS.items()}


@dataclass
class Script:
    shape: str = "native"  # native | chat | completions | messages | responses | ollama
    first_token_seconds: float = 0.05
    gaps_seconds: tuple[float, ...] = (0.02,) * 5  # one per frame after the first
    hang_after_frames: int | None = None
    tag: str = ""  # makes each stream's bytes its own
    tokens_per_frame: int = 1
    #: OpenAI usage: "final" (a usage chunk at the end), "continuous" (on every chunk),
    #: "none", or "asked" (as the request's stream_options say, as SGLang does).
    usage: str = "final"
    #: Seconds before the response headers (SGLang's chat route answers once the first
    #: chunk is ready, so after the prefill).
    headers_after_seconds: float = 0.0
    gzip: bool = False  # the stream as Content-Encoding: gzip

    @property
    def frames(self) -> int:
        return len(self.gaps_seconds) + 1

    @property
    def tokens(self) -> int:
        return self.frames * self.tokens_per_frame


def sse(body: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(body).encode() + b"\n\n"


def _usage(script: Script, asked: dict) -> tuple[bool, bool]:
    """(a final usage chunk, usage on every chunk)."""
    if script.usage == "asked":
        options = asked.get("stream_options") or {}
        return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))
    return script.usage == "final", script.usage == "continuous"


def stream_bytes(script: Script, asked: dict | None = None) -> tuple[bytes, list[bytes]]:
    """(bytes sent before the first token, one byte string per token frame + the tail)."""
    asked = asked or {}
    k = script.tokens_per_frame
    final_usage, continuous = _usage(script, asked)
    head, tail, frames = b"", b"data: [DONE]\n\n", []
    for i in range(script.frames):
        tokens = (i + 1) * k
        words = "".join(f" {script.tag}w{n}" for n in range(i * k, tokens))
        if script.shape == "native":
            body = {"text": "".join(f" {script.tag}w{n}" for n in range(tokens)),
                    "output_ids": list(range(tokens)),
                    "meta_info": {"id": "x", "prompt_tokens": 7, "completion_tokens": tokens,
                                  "cached_tokens": 3, "finish_reason": None}}
            frames.append(sse(body))
        elif script.shape in ("chat", "completions"):
            choice = ({"index": 0, "delta": {"content": words}} if script.shape == "chat"
                      else {"index": 0, "text": words})
            body = {"id": "c", "object": "chat.completion.chunk" if script.shape == "chat"
                    else "text_completion", "created": 1, "model": MODEL, "choices": [choice],
                    "usage": {"prompt_tokens": 7, "completion_tokens": tokens,
                              "total_tokens": 7 + tokens} if continuous else None}
            frames.append(sse(body))
        elif script.shape == "messages":
            frames.append(sse({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": words}},
                              "content_block_delta"))
        elif script.shape == "responses":
            frames.append(sse({"type": "response.output_text.delta", "sequence_number": 4 + i,
                               "output_index": 0, "content_index": 0, "item_id": "msg_1",
                               "delta": words, "logprobs": []}, "response.output_text.delta"))
        else:  # ollama: NDJSON, no SSE
            frames.append(json.dumps({"model": MODEL, "created_at": "t", "message": {
                "role": "assistant", "content": words}, "done": False}).encode() + b"\n")
    if script.shape == "chat":
        head = sse({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    if script.shape in ("chat", "completions") and final_usage:
        tail = sse({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                    "choices": [], "usage": {
                        "prompt_tokens": 7, "completion_tokens": script.tokens,
                        "total_tokens": 7 + script.tokens,
                        "prompt_tokens_details": {"cached_tokens": 3}}}) + tail
    elif script.shape == "messages":
        head = sse({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "model": MODEL, "usage": {"input_tokens": 7, "output_tokens": 0}}},
            "message_start") + sse({"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}},
                                   "content_block_start")
        # As vLLM 0.32 writes it: message_start's usage comes from the first chunk,
        # before the cache reads are known; message_delta's has them, with input_tokens
        # the uncached part (a real vLLM showed it: tests/real_engines/test_vllm.py).
        tail = (sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
                + sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                       "usage": {"input_tokens": 4, "cache_read_input_tokens": 3,
                                 "output_tokens": script.tokens}}, "message_delta")
                + sse({"type": "message_stop"}, "message_stop"))
    elif script.shape == "responses":
        response = {"id": "resp_1", "object": "response", "created_at": 1, "model": MODEL,
                    "status": "in_progress", "output": [], "usage": None}
        head = (sse({"type": "response.created", "sequence_number": 0, "response": response},
                    "response.created")
                + sse({"type": "response.in_progress", "sequence_number": 1,
                       "response": response}, "response.in_progress")
                + sse({"type": "response.output_item.added", "sequence_number": 2,
                       "output_index": 0, "item": {"id": "msg_1", "type": "message",
                                                   "role": "assistant", "status":
                                                   "in_progress", "content": []}},
                      "response.output_item.added")
                + sse({"type": "response.content_part.added", "sequence_number": 3,
                       "output_index": 0, "content_index": 0, "item_id": "msg_1",
                       "part": {"type": "output_text", "text": "", "annotations": []}},
                      "response.content_part.added"))
        tail = sse({"type": "response.completed", "sequence_number": 4 + script.frames,
                    "response": {**response, "status": "completed", "usage": {
                        "input_tokens": 7, "input_tokens_details": {"cached_tokens": 3},
                        "output_tokens": script.tokens,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": 7 + script.tokens}}}, "response.completed")
    elif script.shape == "ollama":
        tail = json.dumps({"model": MODEL, "created_at": "t", "message": {
            "role": "assistant", "content": ""}, "done": True,
            "done_reason": "stop"}).encode() + b"\n"
    frames[-1] += tail
    return head, frames


class _Writer:
    """Writes the stream as it is, or gzip-compressed with each write flushed (as a
    compressing server streams)."""

    def __init__(self, response: web.StreamResponse, compress: bool) -> None:
        self.response = response
        self.compressor = zlib.compressobj(wbits=31) if compress else None  # gzip framing

    async def write(self, data: bytes) -> None:
        if self.compressor is not None:
            data = self.compressor.compress(data) + self.compressor.flush(zlib.Z_SYNC_FLUSH)
        await self.response.write(data)

    async def close(self) -> None:
        if self.compressor is not None:
            await self.response.write(self.compressor.flush())


def error_json(status: int, message: str, kind: str) -> web.Response:
    """An up-front refusal as SGLang's and vLLM's OpenAI servers write it (ErrorResponse)."""
    return web.json_response({"object": "error", "message": message, "type": kind,
                              "param": None, "code": status}, status=status)


@dataclass
class StandIn:
    script: Script = field(default_factory=Script)
    #: Scripts by the `tag` a request names in its body, for concurrent distinct streams.
    scripts: dict[str, Script] = field(default_factory=dict)
    aborted_at: list[float] = field(default_factory=list)
    finished: int = 0
    #: Per stream: when its request arrived, then when each token frame was written.
    #: What the tap measured is checked against these, not the script: under load a
    #: sleep overshoots, and the truth is what was sent when.
    timelines: list[list[float]] = field(default_factory=list)

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)  # a 196K-token prompt fits
        for path in PATHS.values():
            app.router.add_post(path, self.generate)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_route("*", "/echo/{tail:.*}", self.echo)
        self.port = free_port()
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        self.url = f"http://127.0.0.1:{self.port}"
        return self.url

    async def stop(self) -> None:
        await self.runner.cleanup()

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        shape = SHAPES[request.path]
        if body.get("model", MODEL) not in (MODEL, "default"):
            return error_json(404, f"The model `{body['model']}` does not exist.",
                              "NotFoundError")
        if len(json.dumps(body.get("messages", body.get("text", "")))) > CONTEXT_BYTES:
            return error_json(400, "The input is longer than the model's context length "
                                   "(2048 tokens).", "BadRequestError")
        script = self.scripts.get(body.get("tag", ""), self.script)
        if script.shape != shape:
            script = Script(**{**script.__dict__, "shape": shape})
        if not body.get("stream", shape == "ollama"):
            return web.json_response({"id": "n", "object": "chat.completion",
                                      "choices": [{"message": {"content": "hello"}}]},
                                     headers={"X-Engine": "stand-in"})
        timeline = [time.monotonic()]
        self.timelines.append(timeline)
        head, frames = stream_bytes(script, body)
        headers = {"Content-Type": "application/x-ndjson" if shape == "ollama"
                   else "text/event-stream", "X-Engine": "stand-in"}
        if script.gzip:
            headers["Content-Encoding"] = "gzip"
        try:
            if script.headers_after_seconds:
                await asyncio.sleep(script.headers_after_seconds)
            response = web.StreamResponse(headers=headers)
            await response.prepare(request)
            writer = _Writer(response, script.gzip)
            if head:
                await writer.write(head)
            await asyncio.sleep(script.first_token_seconds)
            for i, frame in enumerate(frames):
                if script.hang_after_frames is not None and i >= script.hang_after_frames:
                    await asyncio.sleep(3600)
                if i:
                    await asyncio.sleep(script.gaps_seconds[i - 1])
                timeline.append(time.monotonic())
                await writer.write(frame)
            await writer.close()
        except (asyncio.CancelledError, ConnectionResetError):
            self.aborted_at.append(time.monotonic())
            raise
        self.finished += 1
        return response

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({
            "method": request.method, "raw_path": request.raw_path,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body_sha256": hashlib.sha256(body).hexdigest(), "body_length": len(body),
            "upstream": f"127.0.0.1:{self.port}",
        }, status=int(request.query.get("status", 200)))


@contextlib.asynccontextmanager
async def tap_before(standin: StandIn | None) -> AsyncIterator[tuple[TapSource, str]]:
    """A tap (engine `main`) in front of the stand-in, or of a port where nothing
    listens (None); yields the tap and its URL."""
    url = await standin.start() if standin else f"http://127.0.0.1:{free_port()}"
    address = f"127.0.0.1:{free_port()}"
    tap = TapSource(EngineConfig(name="main", url=url, tap_listen_address=address))
    await tap.start()
    try:
        yield tap, f"http://{address}"
    finally:
        await tap.close()
        if standin:
            await standin.stop()

"""A stand-in engine for the tap tests: streams a scripted gap pattern in the three
shapes the rig sees (SGLang native /generate, OpenAI chat and completions SSE), answers
non-streaming requests, lists models, echoes any request, and notes when a client's
stream was aborted."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field

from aiohttp import web

from exporter.launch import free_port


@dataclass
class Script:
    shape: str = "native"  # native | chat | completions
    first_token_seconds: float = 0.05
    gaps_seconds: tuple[float, ...] = (0.02,) * 5  # one per frame after the first
    hang_after_frames: int | None = None
    tag: str = ""  # makes each stream's bytes its own

    @property
    def frames(self) -> int:
        return len(self.gaps_seconds) + 1


def stream_bytes(script: Script) -> tuple[bytes, list[bytes]]:
    """(bytes sent before the first token, one byte string per token frame + the tail)."""
    head, frames = b"", []
    for i in range(script.frames):
        tokens = i + 1
        text = "".join(f" {script.tag}w{n}" for n in range(tokens))
        if script.shape == "native":
            body = {"text": text, "output_ids": list(range(tokens)),
                    "meta_info": {"id": "x", "prompt_tokens": 7, "completion_tokens": tokens,
                                  "cached_tokens": 3, "finish_reason": None}}
        elif script.shape == "chat":
            body = {"id": "c", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": f" {script.tag}w{i}"}}]}
        else:
            body = {"id": "c", "object": "text_completion",
                    "choices": [{"index": 0, "text": f" {script.tag}w{i}"}]}
        frames.append(b"data: " + json.dumps(body).encode() + b"\n\n")
    if script.shape == "chat":
        head = (b'data: {"id": "c", "choices": [{"index": 0, "delta": '
                b'{"role": "assistant", "content": ""}}]}\n\n')
    tail = b"data: [DONE]\n\n"
    if script.shape != "native":
        usage = {"id": "c", "choices": [], "usage": {
            "prompt_tokens": 7, "completion_tokens": script.frames,
            "prompt_tokens_details": {"cached_tokens": 3}}}
        tail = b"data: " + json.dumps(usage).encode() + b"\n\n" + tail
    frames[-1] += tail
    return head, frames


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
        app = web.Application()
        for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
            app.router.add_post(path, self.generate)
        app.router.add_get("/v1/models", self.models)
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
        if not body.get("stream"):
            return web.json_response({"id": "n", "object": "chat.completion",
                                      "choices": [{"message": {"content": "hello"}}]},
                                     headers={"X-Engine": "stand-in"})
        timeline = [time.monotonic()]
        self.timelines.append(timeline)
        script = self.scripts.get(body.get("tag", ""), self.script)
        head, frames = stream_bytes(script)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "X-Engine": "stand-in"})
        await response.prepare(request)
        try:
            if head:
                await response.write(head)
            await asyncio.sleep(script.first_token_seconds)
            for i, frame in enumerate(frames):
                if script.hang_after_frames is not None and i >= script.hang_after_frames:
                    await asyncio.sleep(3600)
                if i:
                    await asyncio.sleep(script.gaps_seconds[i - 1])
                timeline.append(time.monotonic())
                await response.write(frame)
        except (asyncio.CancelledError, ConnectionResetError):
            self.aborted_at.append(time.monotonic())
            raise
        self.finished += 1
        return response

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "qwen", "object": "model"}]})

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({
            "method": request.method, "raw_path": request.raw_path,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body_sha256": hashlib.sha256(body).hexdigest(), "body_length": len(body),
            "upstream": f"127.0.0.1:{self.port}",
        }, status=int(request.query.get("status", 200)))

"""A stand-in OpenAI chat engine whose streams move only when a test says so, and a
clock the test moves: who waits for whom is then exact, not a race.

Each request names its stream by its first message's content; `frame(key, ...)` sends
that stream's next chunk, `end(key)` its usage chunk and `[DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from exporter.config import AgentConfig, EngineConfig
from exporter.daemon.tap.source import TapSource
from exporter.daemon.tap.state import TapState
from exporter.process.launch import free_port

MODEL = "qwen"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def chunk(delta: dict, usage: dict | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta}] if delta else [], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Gated:
    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[bytes | None]] = {}
        self.bodies: dict[str, dict] = {}
        self.headers: dict[str, dict[str, str]] = {}

    def queue(self, key: str) -> asyncio.Queue[bytes | None]:
        return self.queues.setdefault(key, asyncio.Queue())

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        key = body["messages"][0]["content"]
        self.bodies[key], self.headers[key] = body, dict(request.headers)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}))
        queue = self.queue(key)
        while (data := await queue.get()) is not None:
            await response.write(data)
        await response.write_eof()
        return response

    def tokens(self, key: str, n: int = 1) -> None:
        for i in range(n):
            self.queue(key).put_nowait(chunk({"content": f" w{i}"}))

    def end(self, key: str, prompt: int, completion: int, cached: int | None = None) -> None:
        usage: dict = {"prompt_tokens": prompt, "completion_tokens": completion,
                       "total_tokens": prompt + completion}
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        self.queue(key).put_nowait(chunk({}, usage) + b"data: [DONE]\n\n")
        self.queue(key).put_nowait(None)


@contextlib.asynccontextmanager
async def gated_tap(agents: tuple[AgentConfig, ...], clock: Callable[[], float]
                    ) -> AsyncIterator[tuple[Gated, TapSource, str]]:
    """The gated engine, a tap before it with `agents` on `clock`, and the tap's URL."""
    gated = Gated()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", gated.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    address = f"127.0.0.1:{free_port()}"
    config = EngineConfig(name="main", url=f"http://127.0.0.1:{port}",
                          tap_listen_address=address, agents=agents)
    tap = TapSource(config, TapState(clock, name="main", agents=agents))
    await tap.start()
    try:
        yield gated, tap, f"http://{address}"
    finally:
        for queue in gated.queues.values():
            queue.put_nowait(None)
        await tap.close()
        await runner.cleanup()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Until the tap has seen what the test sent (it runs in the same loop)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)

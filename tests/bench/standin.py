"""A stand-in engine with a scripted pause, speaking both streaming APIs.

The first stream (A) gets a token every `GAP` seconds. When a second request (B)
arrives, A gets nothing for `PAUSE` seconds, and B's first token comes `B_TTFT`
seconds after it was sent. Enough of SGLang's /server_info for the bench.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

GAP = 0.02
PAUSE = 1.0
B_TTFT = 1.2
MAX_TOTAL_NUM_TOKENS = 100_000


class StandIn:
    def __init__(self) -> None:
        self.requests = 0
        self.open_streams = 0
        self.b_arrived: asyncio.Event | None = None
        self.b_arrived_at = 0.0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/server_info", self.server_info)
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        return app

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "stand-in", "chunked_prefill_size": 8192,
                                  "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        openai = request.path.startswith("/v1/")
        wanted = body["max_tokens"] if openai else body["sampling_params"]["max_new_tokens"]
        self.requests += 1
        loop = asyncio.get_running_loop()
        if self.b_arrived is None:
            self.b_arrived = asyncio.Event()
        is_b = self.requests == 2
        if is_b:
            self.b_arrived_at = loop.time()
            self.b_arrived.set()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.open_streams += 1
        try:
            for token in range(1, wanted + 1):
                if is_b and token == 1:
                    await asyncio.sleep(B_TTFT)
                else:
                    await asyncio.sleep(GAP)
                    if not is_b and self.b_arrived.is_set():
                        resume_at = self.b_arrived_at + PAUSE
                        if loop.time() < resume_at:
                            await asyncio.sleep(resume_at - loop.time())
                frame = ({"choices": [{"index": 0, "text": "x"}],
                          "usage": {"completion_tokens": token}} if openai
                         else {"text": "x" * token, "meta_info": {"completion_tokens": token}})
                await response.write(f"data: {json.dumps(frame)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        finally:
            self.open_streams -= 1
        return response

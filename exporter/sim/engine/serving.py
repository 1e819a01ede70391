"""What the simulated servers share: an aiohttp app around a SimEngine, for loopback
clients only, with the simulator's control routes, and the stream pump that moves the
scheduler forward running for as long as the app serves.

SimServer (SGLang, `server.py`) and LlamacppSimServer (`llamacpp.py`) add their routes
to `app`; the OpenAI ones' handlers are here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from exporter.sim.engine import control, generation
from exporter.sim.engine.state import SimEngine


class Serving:
    """The app; `start()` binds 127.0.0.1 on a free port, `stop()` ends it."""

    def __init__(self, state: SimEngine) -> None:
        self.state = state
        self.hub = generation.StreamHub(state)
        self.control = control.Control(state)
        self.app = web.Application(middlewares=[control.loopback_only])
        self.app.add_routes(self.control.routes())
        self.app.cleanup_ctx.append(self._pump)
        self._runner: web.AppRunner | None = None
        self.url = ""

    # The OpenAI routes, the same on both servers (generation.py).

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await generation.completions(self.hub, request,
                                            await generation.read_json(request))

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await generation.chat_completions(self.hub, request,
                                                 await generation.read_json(request))

    async def _pump(self, app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self.hub.pump())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        # A short shutdown timeout: streams in flight end at once on stop (Ctrl-C).
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound = self._runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

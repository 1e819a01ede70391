"""No endpoint of the exporter contacts a host named in the request.

Engine URLs come only from the config. A trap server counts every connection
made to it; every GET route of the web app is requested with the trap's address
in the query, the path and the headers that proxies use to name a host. The
trap must see nothing, while the configured engine is read as usual.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from exporter.config import load_config
from exporter.daemon.runtime import Exporter
from exporter.daemon.web.app import make_app
from tests.daemon.engines.helpers import running_sim
from tests.scrape import serving


class Trap:
    def __init__(self) -> None:
        self.hits = 0

    async def __aenter__(self) -> str:
        async def any_request(request: web.Request) -> web.Response:
            self.hits += 1
            return web.Response(text="# TYPE sglang:num_running_reqs gauge\n")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_request)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def test_query_path_and_headers_cannot_redirect_the_scrape_or_the_probe() -> None:
    trap = Trap()

    async def run() -> tuple[set[str], str]:
        async with trap as trap_address, running_sim() as engine:
            exporter = Exporter(load_config({
                "gpu": {"enabled": False}, "host": {"enabled": False},
                "engine": [{"name": "main", "url": engine.url, "probe_interval_seconds": 0.2}],
            }))
            evil = f"http://{trap_address}"
            hostile_query = {"target": evil, "engine": evil, "url": evil, "module": evil,
                             "host": trap_address}
            hostile_headers = {"X-Forwarded-Host": trap_address,
                               "Forwarded": f"host={trap_address}",
                               "X-Original-URL": evil, "Referer": evil}
            # Every fixed GET path the app serves, so new endpoints are covered too.
            paths = {r.canonical for r in make_app(exporter).router.resources()
                     if "{" not in r.canonical}
            async with serving(exporter) as url, aiohttp.ClientSession() as session:
                for path in paths:
                    for query in ({}, hostile_query):
                        async with session.get(url + path, params=query,
                                               headers=hostile_headers) as response:
                            await response.read()
                    async with session.get(f"{url}{path.rstrip('/')}/{evil}") as response:
                        await response.read()
                await asyncio.sleep(0.6)  # room for the probe and the tracker to run
                async with session.get(url + "/metrics") as response:
                    body = await response.text()
            return paths, body

    paths, body = asyncio.run(run())
    assert {"/metrics", "/", "/-/healthy"} <= paths
    assert trap.hits == 0
    assert 'rig_source_up{source="engine/main"} 1.0' in body

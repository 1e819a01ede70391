"""The HTTP layer: it serves what the runtime reads, and nothing else.

    /metrics    Prometheus exposition, read fresh on every request
    /           landing page with links and each source's state
    /-/healthy  200 while the process serves
    /api/health the health checks as JSON (exporter/health/health.schema.json)
"""

from __future__ import annotations

import html
import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from exporter import __version__
from exporter.config import Config
from exporter.runtime import Exporter

log = logging.getLogger(__name__)

EXPORTER_KEY = web.AppKey("exporter", Exporter)


def make_app(exporter: Exporter) -> web.Application:
    app = web.Application()
    app[EXPORTER_KEY] = exporter
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/", landing_page)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/api/health", api_health)

    async def lifecycle(app: web.Application):
        await exporter.start()
        yield
        await exporter.close()

    app.cleanup_ctx.append(lifecycle)
    return app


async def metrics(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    body = exporter.render(await exporter.snapshot())
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def api_health(request: web.Request) -> web.Response:
    report = await request.app[EXPORTER_KEY].health_report()
    return web.json_response(report.to_json())


async def healthy(request: web.Request) -> web.Response:
    return web.Response(text="OK\n")


async def landing_page(request: web.Request) -> web.Response:
    snapshot = await request.app[EXPORTER_KEY].snapshot()
    rows = "\n".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{'up' if r.up else 'DOWN'}</td>"
        f"<td>{r.duration_seconds * 1000:.1f} ms</td><td>{html.escape(r.error or '')}</td></tr>"
        for r in snapshot.results
    )
    page = f"""<!doctype html>
<html><head><title>rig telemetry exporter</title></head><body>
<h1>rig telemetry exporter {html.escape(__version__)}</h1>
<p><a href="/metrics">/metrics</a> &middot; <a href="/-/healthy">/-/healthy</a></p>
<table border="1" cellpadding="4">
<tr><th>source</th><th>state</th><th>read in</th><th>error</th></tr>
{rows}
</table></body></html>
"""
    return web.Response(text=page, content_type="text/html")


def serve(config: Config) -> None:
    """Serve until SIGINT or SIGTERM; aiohttp then runs the cleanup (closing sources)."""
    app = make_app(Exporter(config))
    log.info("listening on http://%s/", config.web.listen_address)
    web.run_app(app, host=config.web.host, port=config.web.port, print=None,
                handle_signals=True, shutdown_timeout=5)

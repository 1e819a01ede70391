"""The HTTP layer: it serves what the runtime reads, and nothing else.

    /metrics    Prometheus exposition, read fresh on every request
    /           landing page with links and each source's state
    /-/healthy  200 while the process serves
    /api/health the health checks as JSON (exporter/daemon/health/health.schema.json)
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from exporter import __version__
from exporter.config import WebConfig
from exporter.daemon.health.document import AgentLine
from exporter.daemon.runtime import Exporter
from exporter.daemon.snapshot import Snapshot
from exporter.daemon.tap import tap_readings

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
    body = await exporter.exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def api_health(request: web.Request) -> web.Response:
    report = await request.app[EXPORTER_KEY].health_report()
    return web.json_response(report.to_json())


async def healthy(request: web.Request) -> web.Response:
    return web.Response(text="OK\n")


async def landing_page(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    report = await exporter.health_report()
    rows = "\n".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{'up' if r.up else 'DOWN'}</td>"
        f"<td>{r.duration_seconds * 1000:.1f} ms</td><td>{html.escape(r.error or '')}</td></tr>"
        for r in exporter.health.snapshot.results
    )
    # The checks that are not ok, worst first (all of them: rigctl health).
    checks = "\n".join(
        f"<tr><td>{c.status.value}</td><td>{html.escape(c.name)}</td>"
        f"<td>{html.escape(c.reason)}</td></tr>"
        for c in report.checks if c.status.value != "ok"
    )
    page = f"""<!doctype html>
<html><head><title>rig telemetry exporter</title></head><body>
<h1>rig telemetry exporter {html.escape(__version__)}</h1>
<p><a href="/metrics">/metrics</a> &middot; <a href="/api/health">/api/health</a>
&middot; <a href="/-/healthy">/-/healthy</a></p>
<h2>health: {report.status.value}</h2>
<table border="1" cellpadding="4">
<tr><th>status</th><th>check</th><th>reason</th></tr>
{checks}
</table>
<h2>sources</h2>
<table border="1" cellpadding="4">
<tr><th>source</th><th>state</th><th>read in</th><th>error</th></tr>
{rows}
</table>
{_streams_table(exporter.health.snapshot)}{_agents_table(report.agents)}</body></html>
"""
    return web.Response(text=page, content_type="text/html")


def _streams_table(snapshot: Snapshot) -> str:
    """Streams in flight through each tap and the worst gap between tokens of its window."""
    readings = tap_readings(snapshot)
    if not readings:
        return ""
    rows = "\n".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{r.active}</td>"
        f"<td>{r.max_gap_seconds:.2f} s</td></tr>" for r in readings)
    windows = "/".join(sorted({f"{r.window_seconds:g}" for r in readings}))
    return f"""<h2>Streams through the tap</h2>
<table border="1" cellpadding="4">
<tr><th>engine</th><th>streams in flight</th><th>worst token gap, last {windows} s</th></tr>
{rows}
</table>
"""


def _agents_table(agents: Sequence[AgentLine]) -> str:
    """Each agent's streams in flight: age, tokens, the gap open since its last token."""
    rows = []
    for a in agents:
        flights = "<br>".join(
            f"{f.age_seconds:.0f} s old, "
            + ("waiting for its first token" if f.waiting else
               f"{f.tokens:,} tokens, {f.open_gap_seconds or 0:.2f} s since the last")
            + ("" if f.bounded else ", no max_tokens") for f in a.in_flight) or "none"
        rows.append(f"<tr><td>{html.escape(a.engine)}</td><td>{html.escape(a.agent)}</td>"
                    f"<td>{flights}</td></tr>")
    if not rows:
        return ""
    return f"""<h2>Agents</h2>
<table border="1" cellpadding="4">
<tr><th>engine</th><th>agent</th><th>streams in flight</th></tr>
{chr(10).join(rows)}
</table>
"""


def listening_url(web_config: WebConfig, tls: bool) -> str:
    host = web_config.host
    shown = "all interfaces" if host in ("", "0.0.0.0", "::") else None
    scheme = "https" if tls else "http"
    if shown:
        return f"port {web_config.port} on {shown} ({scheme})"
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{web_config.port}/"

"""The HTTP layer: it serves what the runtime reads, and nothing else.

    /metrics    Prometheus exposition, read fresh on every request
    /           landing page with links and each source's state
    /-/healthy  200 while the process serves
    /api/health the health checks as JSON (exporter/health/health.schema.json)
"""

from __future__ import annotations

import asyncio
import html
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from exporter import __version__, event_loop
from exporter.config import Config, ConfigError, WebConfig
from exporter.open_files import connection_budget, raise_soft_limit
from exporter.runtime import Exporter
from exporter.snapshot import Snapshot
from exporter.stopping import STOP_GRACE_SECONDS, StopWatch, log_abandoned
from exporter.tap import tap_readings
from exporter.web_auth import BasicAuth
from exporter.web_listener import IDLE_SECONDS, Listener
from exporter.web_security import WebSecurity

log = logging.getLogger(__name__)
access_logger = logging.getLogger("exporter.access")

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


def _agents_table(agents: Sequence[dict[str, Any]]) -> str:
    """Each agent's streams in flight: age, tokens, the gap open since its last token."""
    rows = []
    for a in agents:
        flights = "<br>".join(
            f"{f['age_seconds']:.0f} s old, "
            + ("waiting for its first token" if f["waiting"] else
               f"{f['tokens']:,} tokens, {f['open_gap_seconds'] or 0:.2f} s since the last")
            + ("" if f["bounded"] else ", no max_tokens") for f in a["in_flight"]) or "none"
        rows.append(f"<tr><td>{html.escape(a['engine'])}</td><td>{html.escape(a['agent'])}</td>"
                    f"<td>{flights}</td></tr>")
    if not rows:
        return ""
    return f"""<h2>Agents</h2>
<table border="1" cellpadding="4">
<tr><th>engine</th><th>agent</th><th>streams in flight</th></tr>
{chr(10).join(rows)}
</table>
"""


def serve(config: Config, security: WebSecurity | None = None,
          reload: Callable[[], Config] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; SIGHUP re-reads the config through `reload`.

    Raises OSError when the address cannot be bound, before anything is logged
    as listening.
    """
    raise_soft_limit()
    event_loop.run(_serve(config, security or WebSecurity(), reload))
    # The loop is closed and its signal handlers with it; what is left of the exit is
    # the interpreter's, which the stop's deadline bounds (exporter/stopping.py). A
    # signal now changes nothing, and must not kill the process with its own status,
    # as the default action would (Python's finalisation resets a handler to it).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


async def _serve(config: Config, security: WebSecurity,
                 reload: Callable[[], Config] | None) -> None:
    exporter = Exporter(config)
    app = make_app(exporter)
    listener = Listener(config.web.host, config.web.port, security.tls,
                        connection_budget(config.web.max_connections))
    app.middlewares.append(listener.middleware())
    auth = BasicAuth(security.basic_auth_users) if security.basic_auth_users else None
    if auth is not None:
        app.middlewares.append(auth.middleware())
    # A scrape of a hung engine may be in flight at SIGTERM: give handlers half a
    # second, then cancel them, so that a stop never waits out the 8 s deadline.
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=STOP_GRACE_SECONDS,
                           keepalive_timeout=IDLE_SECONDS,
                           access_log=access_logger if config.web.access_log else None)
    await runner.setup()
    try:
        await listener.start(runner.server)
        log.info("listening on %s", listening_url(config.web, tls=security.tls is not None))
        stop, watch = asyncio.Event(), StopWatch()

        def on_stop(signal_name: str) -> None:
            if watch.armed:
                watch.again(signal_name)
            watch.arm()
            stop.set()

        loop = asyncio.get_running_loop()
        log.debug("event loop: %s", type(loop).__module__.partition(".")[0])
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_stop, signum.name)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(
            _reload(exporter, reload)))
        await stop.wait()
        log.info("stopping")
    finally:
        await listener.close()
        await runner.cleanup()
    log_abandoned()


async def _reload(exporter: Exporter, reload: Callable[[], Config] | None) -> None:
    """Apply a re-read config to the sources; a bad file leaves the running one in force."""
    if reload is None:
        log.warning("SIGHUP: no config file to reload")
        return
    try:
        config = reload()
    except ConfigError as exc:
        log.error("SIGHUP: config not reloaded, the previous one stays in force: %s", exc)
        return
    if config.web != exporter.config.web:
        log.warning("SIGHUP: [web] changes take effect at the next restart")
    problems = await exporter.reconfigure(replace(config, web=exporter.config.web))
    if problems:
        log.error("SIGHUP: config reloaded in part: %s", "; ".join(problems))
    else:
        log.info("SIGHUP: config reloaded")


def listening_url(web_config: WebConfig, tls: bool) -> str:
    host = web_config.host
    shown = "all interfaces" if host in ("", "0.0.0.0", "::") else None
    scheme = "https" if tls else "http"
    if shown:
        return f"port {web_config.port} on {shown} ({scheme})"
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{web_config.port}/"

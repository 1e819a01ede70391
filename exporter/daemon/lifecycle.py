"""The exporter as a process: serve until SIGINT or SIGTERM, re-read the config on
SIGHUP, and never let a stop wait out a hung scrape.

The web layer (`exporter.daemon.web`) only answers requests; this module owns what lives
as long as the process: the soft open-files limit, the listener, the signals and the
reload.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from aiohttp import web
from msgspec.structs import replace

from exporter.config import Config, ConfigError
from exporter.daemon.runtime import Exporter
from exporter.daemon.sources.blocking import stuck_reads
from exporter.daemon.web.app import listening_url, make_app
from exporter.daemon.web.auth import BasicAuth
from exporter.daemon.web.listener import IDLE_SECONDS, Listener
from exporter.daemon.web.security import WebSecurity
from exporter.process import event_loop
from exporter.process.open_files import connection_budget, raise_soft_limit
from exporter.process.stopping import STOP_GRACE_SECONDS, StopWatch, log_abandoned

log = logging.getLogger(__name__)
access_logger = logging.getLogger("exporter.access")


def serve(config: Config, security: WebSecurity | None = None,
          reload: Callable[[], Config] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; SIGHUP re-reads the config through `reload`.

    Raises OSError when the address cannot be bound, before anything is logged
    as listening.
    """
    raise_soft_limit()
    event_loop.run(_serve(config, security or WebSecurity(), reload))
    # The loop is closed and its signal handlers with it; what is left of the exit is
    # the interpreter's, which the stop's deadline bounds (exporter/process/stopping.py). A
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
        stop, watch = asyncio.Event(), StopWatch(abandoned=stuck_reads)

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
    log_abandoned(stuck_reads())


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

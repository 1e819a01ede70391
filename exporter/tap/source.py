"""`tap/<name>`: the stream tap's listener and lifecycle, and its state at scrape time.

`rig_source_up{source="tap/<name>"}` says whether the tap is serving, no more: an
engine that is down shows as `engine/<name>` down, while the tap stays up and
answers its clients 502.
"""

from __future__ import annotations

import logging

from aiohttp import web

from exporter.config import EngineConfig
from exporter.snapshot import SourceError
from exporter.tap.proxy import TapProxy
from exporter.tap.state import TapReading, TapState

log = logging.getLogger(__name__)


class TapSource:
    def __init__(self, config: EngineConfig, state: TapState | None = None) -> None:
        self.config = config
        self.name = f"tap/{config.name}"
        self.state = state or TapState(window_seconds=config.stall_window_seconds,
                                       name=config.name)
        self.proxy = TapProxy(config.url, self.state)
        self._runner: web.AppRunner | None = None
        self._error: str | None = "not started"

    async def start(self) -> None:
        host, port = split_address(self.config.tap_listen_address)
        await self.proxy.start()
        # handler_cancellation: a client that hangs up cancels its handler at once,
        # which closes the upstream request (aiohttp does not by default since 3.7).
        runner = web.AppRunner(self.proxy.app(), handler_cancellation=True,
                               access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            self._error = f"cannot listen on {self.config.tap_listen_address}: {exc.strerror}"
            log.error("tap %s: %s", self.config.name, self._error)
            return
        self._runner = runner
        self._error = None
        log.info("tap %s: http://%s/ -> %s", self.config.name,
                 self.config.tap_listen_address, self.config.url)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.proxy.close()

    async def read(self) -> TapReading:
        if self._error is not None:
            raise SourceError(self._error)
        return self.state.reading(self.config.kind, self.config.name)


def split_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (validated by the config) -> (host, port); `[::1]:P` gives `::1`."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)

"""`tap/<name>`: the stream tap's listener and lifecycle, and its state at scrape time.

`rig_source_up{source="tap/<name>"}` says whether the tap is serving, no more: an
engine that is down shows as `engine/<name>` down, while the tap stays up and
answers its clients 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from exporter.config import EngineConfig
from exporter.daemon.snapshot import SourceError
from exporter.daemon.tap.proxy import TapProxy
from exporter.daemon.tap.state import TapReading, TapState
from exporter.process.stopping import STOP_GRACE_SECONDS

log = logging.getLogger(__name__)


#: After a reload changed the tap, its old listener lets the streams in flight through
#: it finish for this long (an agent's long answer at a 196K context), then cuts them.
DRAIN_SECONDS = 600.0


def tap_key(config: EngineConfig) -> tuple[object, ...]:
    """What a tap is built from: a reload keeps a tap whose key is unchanged. Its
    agents are not in it: a kept tap takes the new ones (`TapState.set_agents`)."""
    return ("tap", config.name, config.url, config.kind, config.stall_window_seconds,
            config.tap_listen_address)


class TapSource:
    def __init__(self, config: EngineConfig, state: TapState | None = None) -> None:
        self.config = config
        self.name = f"tap/{config.name}"
        self.state = state or TapState(window_seconds=config.stall_window_seconds,
                                       name=config.name, agents=config.agents)
        self.proxy = TapProxy(config.url, self.state)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._error: str | None = "not started"

    @property
    def listening(self) -> bool:
        return self._site is not None

    @property
    def port(self) -> int:
        return split_address(self.config.tap_listen_address)[1]

    @property
    def error(self) -> str | None:
        return self._error

    async def start(self) -> None:
        await self.proxy.start()
        # handler_cancellation: a client that hangs up cancels its handler at once,
        # which closes the upstream request (aiohttp does not by default since 3.7).
        self._runner = web.AppRunner(self.proxy.app(), handler_cancellation=True,
                                     access_log=None, shutdown_timeout=STOP_GRACE_SECONDS)
        await self._runner.setup()
        await self.listen()

    async def listen(self) -> bool:
        """Bind the tap's address. False when it cannot: the source is down and says why."""
        assert self._runner is not None, "TapSource.start() first"
        host, port = split_address(self.config.tap_listen_address)
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await site.stop()  # unregisters it from the runner
            self._error = f"cannot listen on {self.config.tap_listen_address}: {exc.strerror}"
            log.error("tap %s: %s", self.config.name, self._error)
            return False
        self._site, self._error = site, None
        log.info("tap %s: http://%s/ -> %s", self.config.name,
                 self.config.tap_listen_address, self.config.url)
        return True

    async def stop_listening(self) -> None:
        """Close the listening socket; the streams in flight go on."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
            self._error = "not listening"

    async def close(self, drain_seconds: float = 0.0) -> None:
        """Stop listening, give the streams in flight `drain_seconds` to finish, cut the
        rest (after STOP_GRACE_SECONDS), close the upstream session."""
        await self.stop_listening()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain_seconds):
                    await self.proxy.idle()
        finally:  # cancelled mid-drain (the exporter stops) too
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

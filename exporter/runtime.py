"""The running exporter: its sources, their lifecycles, and one scrape's output.

Sources that hold connections or background tasks (engines, the stall tracker,
the stream probe) implement `start` and `close`; the runtime calls them when the
web server starts and stops. Every snapshot also feeds the health monitor
(`exporter/health/`), whose verdict `/api/health` serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, generate_latest

from exporter.collector import RigCollector
from exporter.config import Config
from exporter.engines.probe import ProbeSource
from exporter.engines.source import EngineSource
from exporter.health.monitor import HealthMonitor
from exporter.health.report import Report
from exporter.log_limits import Conditions
from exporter.snapshot import Snapshot, Source, SourceRunner
from exporter.sources.gpu import GpuSource
from exporter.sources.host import HostSource
from exporter.tap.source import TapSource

log = logging.getLogger(__name__)


@runtime_checkable
class Managed(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


def build_sources(config: Config) -> list[Source]:
    sources: list[Source] = []
    if config.gpu.enabled and config.gpu.backend != "none":
        sources.append(GpuSource.from_backend(config.gpu.backend, config.gpu.sysfs_root,
                                              config.gpu.cards, config.gpu.expected_cards,
                                              config.gpu.reading_max_age_seconds))
    if config.host.enabled:
        sources.append(HostSource(config.host.proc_root, config.gpu.sysfs_root))
    for engine_config in config.engines:
        engine = EngineSource(engine_config)
        sources.append(engine)
        # The probe speaks SGLang's /generate stream; it starts after its engine
        # (start order is list order), whose session it shares.
        if engine_config.probe_interval_seconds > 0 and engine_config.kind == "sglang":
            sources.append(ProbeSource(engine))
        elif engine_config.probe_interval_seconds > 0:
            log.warning("engine %s: no stream probe for kind %s (SGLang only)",
                        engine_config.name, engine_config.kind)
        if engine_config.tap_listen_address:
            sources.append(TapSource(engine_config))
    return sources


class Exporter:
    def __init__(self, config: Config, sources: list[Source] | None = None) -> None:
        self.config = config
        self.sources = build_sources(config) if sources is None else sources
        self.runner = SourceRunner(self.sources, config.web.scrape_deadline_seconds)
        self._in_flight: asyncio.Future[Snapshot] | None = None
        self.health = HealthMonitor(config.thresholds, config.engines)
        self._sampler: asyncio.Task[None] | None = None
        self._rendered: tuple[Snapshot, bytes] | None = None
        self._conditions = Conditions(log, level=logging.ERROR)

    async def start(self) -> None:
        for source in self.sources:
            if isinstance(source, Managed):
                await source.start()
        log.info("sources: %s", ", ".join(s.name for s in self.sources) or "none")
        if self.config.health.sample_interval_seconds > 0:
            self._sampler = asyncio.create_task(self._sample_when_idle(),
                                                name="health history sampler")

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        for source in reversed(self.sources):
            if isinstance(source, Managed):
                await source.close()

    async def reconfigure(self, config: Config) -> None:
        """Swap in the sources of a new config: start the new ones, then close the old."""
        sources = build_sources(config)
        for source in sources:
            if isinstance(source, Managed):
                await source.start()
        old = self.sources
        self.config, self.sources = config, sources
        self.runner = SourceRunner(sources, config.web.scrape_deadline_seconds,
                                   self.runner.conditions)
        self._in_flight = None
        self.health.reconfigure(config.thresholds, config.engines)
        for source in reversed(old):
            if isinstance(source, Managed):
                await source.close()

    async def snapshot(self) -> Snapshot:
        """Read every source; scrapes, health requests and the health sampler that
        arrive while a read is under way share it.

        Fifty scrapes at once then cost SGLang and sysfs one read, not fifty. The
        shield keeps one scraper's disconnect from cancelling the others' read.
        """
        if self._in_flight is None or self._in_flight.done():
            self._in_flight = asyncio.ensure_future(self._read_and_observe())
        return await asyncio.shield(self._in_flight)

    async def _read_and_observe(self) -> Snapshot:
        snapshot = await self.runner.snapshot()
        self.health.observe(snapshot)
        return snapshot

    async def health_report(self) -> Report:
        """A fresh snapshot, judged: the same reads as one scrape, nothing more."""
        await self.snapshot()
        assert self.health.report is not None
        return self.health.report

    async def _sample_when_idle(self) -> None:
        # Scrapes feed the history; only when none came for an interval does the
        # exporter read a snapshot itself, so Prometheus at 15 s adds nothing.
        started = time.monotonic()
        while True:
            interval = max(0.05, self.config.health.sample_interval_seconds)  # may be reloaded
            last = self.health.last_observed
            idle = time.monotonic() - (started if last is None else last)
            if idle >= interval:
                try:
                    await self.snapshot()
                except Exception as exc:  # a bug must not end the sampling for good
                    self._conditions.failed("health sampler", f"snapshot failed: {exc!r}",
                                            kind=type(exc).__name__, exc=exc)
                else:
                    self._conditions.ok("health sampler")
                idle = 0.0
            await asyncio.sleep(max(0.05, interval - idle))

    async def exposition(self) -> bytes:
        """The /metrics body. Scrapes that share a snapshot share its rendering too."""
        snapshot = await self.snapshot()
        if self._rendered is None or self._rendered[0] is not snapshot:
            self._rendered = (snapshot, self.render(snapshot))
        return self._rendered[1]

    @staticmethod
    def render(snapshot: Snapshot) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RigCollector(snapshot))
        return generate_latest(registry)

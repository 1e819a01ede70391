"""The running exporter: its sources, their lifecycles, and one scrape's output.

Sources that hold connections or background tasks (engines, the stall tracker,
the stream probe) implement `start` and `close`; the runtime calls them when the
web server starts and stops. Every snapshot also feeds the health monitor
(`exporter/daemon/health/`), whose verdict `/api/health` serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Protocol, runtime_checkable

from msgspec.structs import replace
from prometheus_client import CollectorRegistry, generate_latest

from exporter.config import Config
from exporter.daemon.collector import RigCollector
from exporter.daemon.engines.probe import ProbeSource
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.health.monitor import HealthMonitor
from exporter.daemon.health.report import Report
from exporter.daemon.snapshot import Snapshot, Source, SourceRunner
from exporter.daemon.sources.gpu import GpuSource
from exporter.daemon.sources.host import HostSource
from exporter.daemon.tap.source import DRAIN_SECONDS, TapSource, tap_key
from exporter.process.in_flight import InFlight
from exporter.process.log_limits import Conditions

log = logging.getLogger(__name__)


@runtime_checkable
class Managed(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


def build_sources(config: Config,
                  kept: Mapping[Hashable, Source] | None = None) -> dict[Hashable, Source]:
    """The sources of `config`, in start order, by what each is built from; a source
    of `kept` under the same key is used again as it is (docs/deploy.md#reloading)."""
    kept = kept or {}
    sources: dict[Hashable, Source] = {}

    def add(key: Hashable, make: Callable[..., Source], *args: object) -> Source:
        sources[key] = kept[key] if key in kept else make(*args)
        return sources[key]

    if config.gpu.enabled and config.gpu.backend != "none":
        add(("gpu", config.gpu), GpuSource.from_backend, config.gpu.backend,
            config.gpu.sysfs_root, config.gpu.cards, config.gpu.expected_cards,
            config.gpu.reading_max_age_seconds)
    if config.host.enabled:
        add(("host", config.host, config.gpu.sysfs_root), HostSource,
            config.host.proc_root, config.gpu.sysfs_root)
    for engine_config in config.engines:
        # The engine and its probe are built from the whole [[engine]] table but the
        # tap's address: moving the tap restarts neither (nor the stall tracker).
        table = replace(engine_config, tap_listen_address="", agents=())
        engine = add(("engine", table), EngineSource, engine_config)
        # The probe starts after its engine (start order is list order), whose session
        # it shares.
        if engine_config.probe_interval_seconds > 0:
            add(("probe", table), ProbeSource, engine)
        if engine_config.tap_listen_address:
            tap = add(tap_key(engine_config), TapSource, engine_config)
            assert isinstance(tap, TapSource)
            tap.state.set_agents(engine_config.agents)
        elif engine_config.agents:
            log.warning("engine %s: its [[engine.agent]] tables name nothing without a stream "
                        "tap (tap_listen_address)", engine_config.name)
    return sources


def _predecessor(tap: TapSource, old_taps: list[TapSource]) -> TapSource | None:
    """The old tap a new one replaces: its engine's, else the one on its port."""
    return (next((old for old in old_taps if old.name == tap.name), None)
            or next((old for old in old_taps if old.port == tap.port), None))


class Exporter:
    def __init__(self, config: Config, sources: list[Source] | None = None) -> None:
        self.config = config
        self._by_key = (build_sources(config) if sources is None
                        else {("given", i): s for i, s in enumerate(sources)})
        self.sources = list(self._by_key.values())
        self.runner = SourceRunner(self.sources, config.web.scrape_deadline_seconds)
        self._reading = InFlight(self._read_and_observe)
        self.health = HealthMonitor(config.thresholds, config.engines)
        self._sampler: asyncio.Task[None] | None = None
        self._rendered: tuple[Snapshot, bytes] | None = None
        self._conditions = Conditions(log, level=logging.ERROR)
        # A reload and a stop never interleave; a reload after the stop does nothing.
        self._lock = asyncio.Lock()
        self._closed = False
        self._draining: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for source in self.sources:
            if isinstance(source, Managed):
                await source.start()
        log.info("sources: %s", ", ".join(s.name for s in self.sources) or "none")
        if self.config.health.sample_interval_seconds > 0:
            self._sampler = asyncio.create_task(self._sample_when_idle(),
                                                name="health history sampler")

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._sampler is not None:
                self._sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sampler
            for task in self._draining:
                task.cancel()  # the tap cuts its streams and closes (TapSource.close)
            await asyncio.gather(*self._draining, return_exceptions=True)
            for source in reversed(self.sources):
                if isinstance(source, Managed):
                    await source.close()

    async def reconfigure(self, config: Config) -> list[str]:
        """Swap in the sources of a new config, keeping those built the same way: a tap
        keeps its socket and counts, an engine its stall tracker. Returns what could
        not be applied: a changed tap that cannot bind its new address stays as it was.
        """
        async with self._lock:
            if self._closed:
                return ["the exporter is stopping"]
            # A tap that is not listening (its port was taken) is built again: it retries.
            wanted = build_sources(config, {k: s for k, s in self._by_key.items() if not (
                isinstance(s, TapSource) and not s.listening)})
            gone = [s for s in self.sources if s not in wanted.values()]
            added = [s for s in wanted.values() if s not in self.sources]
            old_taps = [s for s in gone if isinstance(s, TapSource) and s.listening]
            new_taps = [s for s in added if isinstance(s, TapSource)]
            for old in old_taps:
                if any(new.port == old.port for new in new_taps):
                    await old.stop_listening()  # frees the port the new tap binds
            for source in added:
                if isinstance(source, Managed):
                    await source.start()
            problems = []
            for new in new_taps:
                old = _predecessor(new, old_taps)
                if new.listening or old is None or not (old.listening or await old.listen()):
                    continue
                # The old tap stays, under its own key: the next reload tries again.
                problems.append(f"tap {old.config.name} stays on "
                                f"{old.config.tap_listen_address}: {new.error}")
                await new.close()
                old_key = next(k for k, s in self._by_key.items() if s is old)
                wanted = {(old_key if s is new else k): (old if s is new else s)
                          for k, s in wanted.items()}
                gone.remove(old)
                old_taps.remove(old)
            self.config, self._by_key = config, wanted
            self.sources = list(wanted.values())
            # The sources' states carry over: a source still down is not told again.
            self.runner = SourceRunner(self.sources, config.web.scrape_deadline_seconds,
                                       self.runner.conditions)
            self._reading = InFlight(self._read_and_observe)  # the old runner's read is left
            self.health.reconfigure(config.thresholds, config.engines)
            log.info("sources: %s (started: %s)", ", ".join(s.name for s in self.sources)
                     or "none", ", ".join(s.name for s in added if s in self.sources) or "none")
            for source in reversed(gone):
                if isinstance(source, TapSource):
                    # Its streams in flight finish on the old listener, in the background.
                    task = asyncio.create_task(source.close(DRAIN_SECONDS),
                                               name=f"{source.name} draining")
                    self._draining.add(task)
                    task.add_done_callback(self._draining.discard)
                elif isinstance(source, Managed):
                    await source.close()
            return problems

    async def snapshot(self) -> Snapshot:
        """Read every source; scrapes, health requests and the health sampler that
        arrive while a read is under way share it.

        Fifty scrapes at once then cost SGLang and sysfs one read, not fifty; one
        scraper's disconnect does not cancel the others' read (exporter/process/in_flight.py).
        """
        return await self._reading()

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

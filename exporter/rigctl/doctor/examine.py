"""One doctor run: watch the exporter, then judge every concern.

It scrapes the exporter's /metrics at the start, halfway and at the end of the
watch (`watch_seconds`, 5 s at least: the energy check needs it), sending one
stream probe to each engine meanwhile with --probe (through its tap when it has
one, so both the tap and the engine count it). Then each concern's module judges
what was seen; the checks of files read them now, on this host.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
import msgspec

from exporter.config import Config, EngineConfig
from exporter.daemon.engines.probe import ProbeResult, StreamProbe
from exporter.process.ctrl_c import run_interruptible
from exporter.rigctl.client.http import NO_ACCESS, Access, url_of
from exporter.rigctl.doctor.context import Context
from exporter.rigctl.doctor.engine import engine_checks
from exporter.rigctl.doctor.gpu import gpu_checks
from exporter.rigctl.doctor.grafana import grafana_checks
from exporter.rigctl.doctor.host import host_checks
from exporter.rigctl.doctor.prometheus import prometheus_checks
from exporter.rigctl.doctor.report import Check, Verdict, skip
from exporter.rigctl.doctor.watch import Scrape, Watch, scrape
from exporter.schema import engine_source

MIN_WATCH_SECONDS = 5.0
#: The probe's stream gets this long beyond its own deadline before the watch ends without it.
PROBE_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class Request:
    """What to examine, from rigctl doctor's flags."""

    exporter: str
    access: Access = NO_ACCESS
    config: Config | None = None
    config_path: str | None = None
    prometheus: str | None = None
    alertmanager: str | None = None
    grafana: str | None = None
    grafana_access: Access = NO_ACCESS
    probe: bool = False
    watch_seconds: float = 6.0
    timeout: float = 10.0


def examine(r: Request) -> Verdict:
    """Unreachable (exporter.rigctl.commands.common) when the exporter does not answer."""
    watch, probed = run_interruptible(_watch(r))
    c = Context(r.exporter, watch, r.config, r.config_path, r.timeout, probed)
    checks: list[Check] = [*engine_checks(c), *gpu_checks(c), *host_checks(c)]
    interval = None
    if r.prometheus is not None:
        found = prometheus_checks(c, r.prometheus, r.alertmanager)
        checks += found.checks
        interval = found.scrape_interval_seconds
    else:
        checks.append(skip("prometheus", "rig", "Prometheus not checked",
                           "give --prometheus URL"))
    if r.grafana is not None:
        checks += grafana_checks(c, r.grafana, r.grafana_access, r.prometheus, interval)
    else:
        checks.append(skip("grafana", "rig", "Grafana not checked", "give --grafana URL"))
    return Verdict(tuple(checks), r.exporter, watch.seconds)


def _probed_engines(config: Config | None, first: Scrape) -> list[EngineConfig]:
    """The config's engines that the exporter reads, each pointed at its tap if it has
    one."""
    if config is None:
        return []
    served = {s.labels.get("source", "") for s in first.all("rig_source_up")}
    return [msgspec.structs.replace(e, url=_tap_url(e.tap_listen_address) or e.url)
            for e in config.engines if engine_source(e.name) in served]


def _tap_url(address: str) -> str:
    return url_of(address) if address else ""


async def _watch(r: Request) -> tuple[Watch, dict[str, ProbeResult]]:
    """Three scrapes over the watch, the probes meanwhile on the same loop."""
    first = await scrape(r.exporter, r.timeout, r.access)
    engines = _probed_engines(r.config, first) if r.probe else []
    probing = asyncio.ensure_future(_probe(engines))
    try:
        watch_seconds = max(MIN_WATCH_SECONDS, r.watch_seconds)
        await asyncio.sleep(max(0.0, first.at + watch_seconds / 2 - time.monotonic()))
        middle = await scrape(r.exporter, r.timeout, r.access)
        await asyncio.sleep(max(0.0, first.at + watch_seconds - time.monotonic()))
        # A probe gets its own deadline and a grace beyond the watch, then is given up.
        await asyncio.wait([probing], timeout=max(
            (e.probe_timeout_seconds for e in engines), default=0.0) + PROBE_GRACE_SECONDS)
        probed = probing.result() if probing.done() else {}
        return Watch((first, middle, await scrape(r.exporter, r.timeout, r.access))), probed
    finally:
        probing.cancel()


async def _probe(engines: list[EngineConfig]) -> dict[str, ProbeResult]:
    """The doctor's own probes, one per engine, at once."""
    if not engines:
        return {}
    async with aiohttp.ClientSession() as session:
        probes = [StreamProbe(lambda: session, engine) for engine in engines]
        results = await asyncio.gather(*(p.probe_once() for p in probes))
    return {e.name: result for e, result in zip(engines, results, strict=True)}

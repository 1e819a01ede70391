"""Shared by the engine tests: fixtures on disk, a simulated SGLang on a loopback port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import cache
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, EngineConfig, GpuConfig, HostConfig
from exporter.daemon.runtime import Exporter
from exporter.daemon.snapshot import SourceRunner
from exporter.sim.engine.server import SimServer
from exporter.sim.engine.state import SimEngine

FIXTURES = Path(__file__).parents[2] / "fixtures" / "engine"
SGLANG_SINGLE = FIXTURES / "sglang-0.5.23-metrics.txt"
SGLANG_MULTIPROC = FIXTURES / "sglang-0.5.23-metrics-multiproc-b.txt"
VLLM = FIXTURES / "vllm-0.33.0-metrics.txt"


def reference_samples(text: str, sample_name: str) -> list:
    """Samples of one name as prometheus_client's own parser reads them: the independent
    path the expected values are computed on."""
    return [s for family in reference_families(text)
            for s in family.samples if s.name == sample_name]


@cache
def reference_families(text: str) -> tuple:
    return tuple(text_string_to_metric_families(text))


def engine_config(url: str, **changes: object) -> EngineConfig:
    return EngineConfig(name=str(changes.pop("name", "main")), url=url, **changes)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running_sim(state: SimEngine | None = None) -> AsyncIterator[SimServer]:
    server = SimServer(state)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


HEALTHY = dict(queued=1, token_usage=0.9, hicache_host_used_tokens=318900,
               hicache_host_total_tokens=319193, cached_tokens={"device": 120, "host": 30})


def sim_state(**changes: object) -> SimEngine:
    state = SimEngine(**{**HEALTHY, **changes})  # type: ignore[arg-type]
    state.running = 2
    return state


async def scrape(faulty: SimEngine, deadline: float = 1.5) -> tuple[dict, str]:
    """One exporter with a faulty engine `bad` and a healthy engine `good`; render once."""
    async with running_sim(faulty) as bad, running_sim(sim_state()) as good:
        config = Config(
            gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
            engines=(engine_config(bad.url, name="bad", stall_tracker=False),
                     engine_config(good.url, name="good", stall_tracker=False)),
        )
        exporter = Exporter(config)
        exporter.runner = SourceRunner(exporter.sources, deadline)
        await exporter.start()
        try:
            await asyncio.sleep(0.1)
            text = exporter.render(await exporter.snapshot()).decode()
        finally:
            await exporter.close()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, s.labels.get("source") or s.labels.get("engine"), s.labels.get("tier"))
            samples[key] = s.value
    return samples, text

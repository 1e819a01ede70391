"""Shared by the engine tests: fixtures on disk, a simulated SGLang on a loopback port."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import cache
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.config import EngineConfig
from exporter.sim.engine.server import SimServer
from exporter.sim.engine.state import SimEngine

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine"
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

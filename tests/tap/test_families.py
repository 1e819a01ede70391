"""The tap inside the exporter: its families in the scrape, and rig_source_up kept truthful."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, EngineConfig, GpuConfig, HostConfig
from exporter.runtime import Exporter
from tests.scrape import free_port
from tests.tap.standin import Script, StandIn


def exporter_with_tap(url: str, address: str) -> Exporter:
    engine = EngineConfig(name="main", url=url, stall_tracker=False, tap_listen_address=address)
    return Exporter(Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                           engines=(engine,)))


def samples(text: str) -> dict[tuple, float]:
    """Keyed by (name, *label pairs) in the order engine, name, then the rest."""
    def key(labels: dict[str, str]) -> list[tuple[str, str]]:
        return sorted(labels.items(), key=lambda kv: (kv[0] not in ("engine", "name"), kv))
    return {(s.name, *key(s.labels)): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_engine_down_the_tap_answers_502_and_stays_up():
    async def scenario() -> tuple[int, str]:
        address = f"127.0.0.1:{free_port()}"
        exporter = exporter_with_tap(f"http://127.0.0.1:{free_port()}", address)
        await exporter.start()
        try:
            async with aiohttp.ClientSession() as session, \
                    session.post(f"http://{address}/v1/chat/completions",
                                 json={"stream": True}) as response:
                status = response.status
            return status, exporter.render(await exporter.snapshot()).decode()
        finally:
            await exporter.close()

    status, text = asyncio.run(scenario())
    values = samples(text)
    assert status == 502
    assert values[("rig_source_up", ("source", "engine/main"))] == 0.0
    assert values[("rig_source_up", ("source", "tap/main"))] == 1.0
    ids = (("engine", "sglang"), ("name", "main"))
    assert values[("rig_stream_requests_total", *ids, ("outcome", "error"))] == 1.0
    assert values[("rig_stream_active", *ids)] == 0.0


def test_stream_families_with_engine_and_name_labels():
    script = Script(shape="chat", first_token_seconds=0.1, gaps_seconds=(0.02, 0.4, 0.02))

    async def scenario() -> str:
        standin = StandIn(script)
        url = await standin.start()
        address = f"127.0.0.1:{free_port()}"
        exporter = exporter_with_tap(url, address)
        await exporter.start()
        try:
            async with aiohttp.ClientSession() as session, \
                    session.post(f"http://{address}/v1/chat/completions",
                                 json={"stream": True}) as response:
                await response.read()
            return exporter.render(await exporter.snapshot()).decode()
        finally:
            await exporter.close()
            await standin.stop()

    values = samples(asyncio.run(scenario()))
    ids = (("engine", "sglang"), ("name", "main"))
    assert values[("rig_stream_requests_total", *ids, ("outcome", "ok"))] == 1.0
    assert values[("rig_stream_requests_total", *ids, ("outcome", "client_closed"))] == 0.0
    assert values[("rig_stream_ttft_seconds_count", *ids)] == 1.0
    assert values[("rig_stream_ttft_seconds_bucket", *ids, ("le", "0.01"))] == 0.0
    assert values[("rig_stream_token_gap_seconds_count", *ids)] == 3.0
    assert values[("rig_stream_token_gap_seconds_bucket", *ids, ("le", "0.25"))] == 2.0
    assert values[("rig_stream_max_token_gap_seconds", *ids)] == pytest.approx(0.4, abs=0.05)
    assert values[("rig_stream_generated_tokens_total", *ids)] == 4.0
    assert values[("rig_source_up", ("source", "tap/main"))] == 1.0

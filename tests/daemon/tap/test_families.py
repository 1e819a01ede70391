"""The tap inside the exporter: its families in the scrape, and rig_source_up kept truthful."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, EngineConfig, GpuConfig, HostConfig
from exporter.daemon.runtime import Exporter
from exporter.process.launch import free_port
from tests.daemon.tap.standin import Script, StandIn
from tests.scrape import get, serving


def exporter_with_tap(url: str, address: str) -> Exporter:
    engine = EngineConfig(name="main", url=url, stall_tracker=False, tap_listen_address=address)
    return Exporter(Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                           engines=(engine,)))


def samples(text: str) -> dict[tuple, float]:
    """Keyed by (name, *label pairs) in the order engine, kind, then the rest."""
    def key(labels: dict[str, str]) -> list[tuple[str, str]]:
        return sorted(labels.items(), key=lambda kv: (kv[0] not in ("engine", "kind"), kv))
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
    ids = (("engine", "main"), ("kind", "sglang"))
    assert values[("rig_stream_requests_total", *ids, ("outcome", "error"))] == 1.0
    assert values[("rig_stream_active", *ids)] == 0.0


def test_stream_families_with_engine_and_kind_labels():
    script = Script(shape="chat", first_token_seconds=0.1, gaps_seconds=(0.02, 0.4, 0.02))

    standin = StandIn(script)

    async def scenario() -> str:
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
    ids = (("engine", "main"), ("kind", "sglang"))
    assert values[("rig_stream_requests_total", *ids, ("outcome", "ok"))] == 1.0
    assert values[("rig_stream_requests_total", *ids, ("outcome", "client_closed"))] == 0.0
    assert values[("rig_stream_ttft_seconds_count", *ids)] == 1.0
    assert values[("rig_stream_ttft_seconds_bucket", *ids, ("le", "0.01"))] == 0.0
    assert values[("rig_stream_token_gap_seconds_count", *ids)] == 3.0
    # The 0.4 s gap lies above 0.25 s, the two 0.02 s gaps below (under load, both
    # could stretch: bounds against what the engine did).
    written = standin.timelines[0][1:]
    sent_gaps = [b - a for a, b in zip(written, written[1:], strict=False)]
    below = sum(gap <= 0.25 for gap in sent_gaps)
    assert values[("rig_stream_token_gap_seconds_bucket", *ids, ("le", "0.25"))] == below
    assert values[("rig_stream_max_token_gap_seconds", *ids)] == pytest.approx(
        max(sent_gaps), abs=0.05)
    assert values[("rig_stream_generated_tokens_total", *ids)] == 4.0
    assert values[("rig_source_up", ("source", "tap/main"))] == 1.0


def test_landing_page_shows_streams_in_flight_and_the_worst_gap():
    script = Script(shape="native", first_token_seconds=0.02, gaps_seconds=(0.02,) * 3,
                    hang_after_frames=2)

    async def scenario() -> str:
        standin = StandIn(script)
        url = await standin.start()
        address = f"127.0.0.1:{free_port()}"
        exporter = exporter_with_tap(url, address)
        try:
            async with serving(exporter) as exporter_url, aiohttp.ClientSession() as session, \
                    session.post(f"http://{address}/generate", json={"stream": True}) as stream:
                got = b""
                while got.count(b"\n\n") < 2:
                    got += await stream.content.readany()
                await asyncio.sleep(0.5)  # the stream hangs: an open gap
                return (await get(exporter_url + "/"))[2]
        finally:
            await standin.stop()

    page = asyncio.run(scenario())
    assert "Streams through the tap" in page
    row = re.search(r"<tr><td>main</td><td>(\d+)</td><td>([\d.]+) s</td></tr>", page)
    assert row is not None, page
    assert int(row.group(1)) == 1
    assert float(row.group(2)) >= 0.5

"""The simulated llama-server: its shapes match the real captures, and the exporter
reads it as kind "llamacpp" end to end (collector, per-slot series, stall tracker)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import msgspec
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, GpuConfig, HostConfig
from exporter.daemon.runtime import Exporter
from exporter.sim.engine.llamacpp import LlamacppSimServer
from exporter.streams import StreamMeter
from tests.daemon.engines.helpers import engine_config

FIXTURES = Path(__file__).parent.parent / "fixtures" / "llamacpp"


def families(text: str) -> dict[str, str]:
    return {line.split()[2]: line.split()[3] for line in text.splitlines()
            if line.startswith("# TYPE ")}


def test_metrics_and_slots_have_the_real_shapes():
    async def scenario() -> tuple[str, list, str]:
        server = LlamacppSimServer()
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url + "/metrics") as response:
                    text = await response.text()
                    header = response.headers["Process-Start-Time-Unix"]
                async with session.get(server.url + "/slots") as response:
                    slots = await response.json()
        finally:
            await server.stop()
        return text, slots, header

    text, slots, header = asyncio.run(scenario())
    real = (FIXTURES / "metrics_idle.txt").read_text()
    # Every family of the real server, typed as it types them (n_busy_slots_per_decode
    # aside, which nothing reads).
    assert families(text) == {k: v for k, v in families(real).items()
                              if k != "llamacpp:n_busy_slots_per_decode"}
    real_slot = json.loads((FIXTURES / "during_slots.txt").read_text())[0]
    assert set(slots[0]) == set(real_slot)
    assert abs(int(header) / 1e6 - time.time()) > 3600  # not Unix time, as llama.cpp's


def exporter_series(text: str) -> dict[str, float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("engine") == "main":
                slot = sample.labels.get("slot")
                values[sample.name + (f"[{slot}]" if slot else "")] = sample.value
    return values


async def stream_native(url: str, prompt: str, n_predict: int, meter: StreamMeter) -> None:
    async with aiohttp.ClientSession() as session, session.post(url + "/completion", json={
            "prompt": prompt, "n_predict": n_predict, "stream": True}) as response:
        async for chunk in response.content.iter_any():
            meter.feed(chunk, time.monotonic())


def test_exporter_reads_a_simulated_llamacpp_and_its_stall():
    """A decodes; decode is held for 2 s (as a prompt's batch holds it); the tracker
    reads that stall from /slots within its bounds, and the client saw the same gap."""

    async def scenario():
        server = LlamacppSimServer()
        await server.start()
        config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                        engines=(engine_config(server.url, kind="llamacpp"),))
        exporter = Exporter(config)
        await exporter.start()
        meter = StreamMeter(sent_at=time.monotonic())
        try:
            client = asyncio.create_task(stream_native(server.url, "x" * 400, 400, meter))
            await asyncio.sleep(1.0)
            during = exporter.render(await exporter.snapshot()).decode()
            server.state.pause_decode(2.0)
            await asyncio.sleep(3.0)
            after = exporter.render(await exporter.snapshot()).decode()
            await asyncio.wait_for(client, 60)
            await asyncio.sleep(0.5)  # a scrape reuses the tracker's /slots of 0.25 s ago
            done = exporter.render(await exporter.snapshot()).decode()
        finally:
            await exporter.close()
            await server.stop()
        return exporter_series(during), exporter_series(after), exporter_series(done), meter

    during, after, done, meter = asyncio.run(scenario())
    assert during["rig_engine_running_requests"] == 1
    assert during["rig_engine_slot_processing[0]"] == 1
    assert during["rig_engine_slot_request_tokens[0]"] > 100
    assert during["rig_engine_slot_context_tokens[0]"] == 32768
    assert during["rig_engine_context_length_tokens"] == 32768
    assert during["rig_engine_decode_stall_seconds"] == 0
    # The token counters move when a request finishes, as llama.cpp's do.
    assert during.get("rig_engine_generation_tokens_total", 0) == 0
    client_gap = meter.timer.timing().max_gap_seconds
    low, high = (after["rig_engine_decode_stall_max_seconds"],
                 after["rig_engine_decode_stall_max_upper_seconds"])
    assert 1.9 <= client_gap <= 2.6
    assert low <= client_gap + 0.05 and client_gap <= high + 0.05
    assert high - low <= 0.6  # two polls of 0.25 s, and their answers
    assert done["rig_engine_generation_tokens_total"] == 400
    assert done["rig_engine_slot_processing[0]"] == 0


def test_a_llamacpp_rig_serves_its_agents_through_the_tap() -> None:
    """`python -m exporter.sim --engine-kind llamacpp`, as `rigctl demo --engine-kind
    llamacpp` starts it: the exporter reads it as kind llamacpp, and every agent
    (creative on the native /completion) is timed and counted through the tap."""
    from exporter.sim.agents import NATIVE, roster_for
    from exporter.sim.rig.simrig import SimRig
    from tests.scrape import get, serving

    roster = roster_for("llamacpp")
    assert [s.route for s in roster if s.name == "creative"] == [NATIVE]

    async def run() -> tuple[str, set[str], list]:
        async with SimRig(time_scale=50.0, stall_scale=2.0, engine_kind="llamacpp") as rig:
            exporter = Exporter(rig.exporter_config())
            async with serving(exporter) as url:
                tasks = []
                for spec in roster:
                    agent = rig.agent(spec.name)
                    agent.start_session(500)
                    tasks.append(agent.send(20))
                await asyncio.wait_for(asyncio.gather(*tasks), 20)
                # A second turn on creative's session: its prefix comes from the cache.
                await asyncio.wait_for(rig.agent("creative").send(5), 20)
                outcomes = {t.outcome for spec in roster for t in rig.agent(spec.name).turns}
                await asyncio.sleep(0.3)
                _, _, text = await get(url + "/metrics")
                return text, outcomes, list(rig.agent("creative").turns)

    text, outcomes, creative = asyncio.run(run())
    assert outcomes == {"done"}
    for spec in roster:
        assert (f'rig_agent_requests_total{{agent="{spec.name}",engine="main",'
                f'kind="llamacpp",outcome="ok"}}') in text, spec.name
    assert 'rig_engine_slot_context_tokens{engine="main",kind="llamacpp",slot="0"}' in text
    assert 'rig_engine_decode_stall_plan_info{engine="main",in_flight="slots_decoding"' in text
    # The native stream's last frame says the cached part (timings.cache_n), after the
    # prompt came on the first: the tap counts it for the agent all the same.
    assert creative[-1].tokens == 5 and (creative[-1].cached_tokens or 0) > 500
    cached = next(float(line.rpartition(" ")[2]) for line in text.splitlines()
                  if line.startswith('rig_agent_cached_prompt_tokens_total{agent="creative"'))
    assert cached == sum(t.cached_tokens or 0 for t in creative)


def test_the_exporter_probes_a_llamacpp_on_its_schedule():
    """The stream probe on llama.cpp asks /v1/completions, where the usage comes on the
    last frame: a probe of 8 tokens succeeds and counts them."""

    async def scenario():
        server = LlamacppSimServer()
        await server.start()
        engine = msgspec.structs.replace(engine_config(server.url, kind="llamacpp"),
                                     probe_interval_seconds=60.0, probe_max_new_tokens=8)
        exporter = Exporter(Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                                   engines=(engine,)))
        await exporter.start()
        try:
            deadline = time.monotonic() + 30
            while True:  # the first probe runs at start
                seen = exporter_series(exporter.render(await exporter.snapshot()).decode())
                if "rig_probe_success" in seen or time.monotonic() > deadline:
                    return seen
                await asyncio.sleep(0.2)
        finally:
            await exporter.close()
            await server.stop()

    seen = asyncio.run(scenario())
    assert seen.get("rig_probe_success") == 1, seen
    assert seen["rig_probe_ttft_seconds"] > 0

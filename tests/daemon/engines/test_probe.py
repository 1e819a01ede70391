"""The stream probe against the simulator's /generate with known frame timing."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, GpuConfig, HostConfig
from exporter.daemon.engines.probe import ProbeBusy, StreamProbe, probe_prompt
from exporter.daemon.runtime import Exporter
from exporter.sim.engine.state import SimEngine, StreamScript
from tests.daemon.engines.helpers import engine_config, running_sim

GAPS = [0.05, 0.3, 0.1, 0.6, 0.02, 0.02, 0.02]  # before frames 2..8
SCRIPT = StreamScript(first_token_seconds=0.2, gaps_seconds=GAPS, tokens_per_frame=2)


async def probe_against(script: StreamScript, **config: object):
    state = SimEngine(stream=script)
    async with running_sim(state) as server, aiohttp.ClientSession() as session:
        probe = StreamProbe(lambda: session, engine_config(server.url, **config))
        started = time.monotonic()
        result = await probe.probe_once()
        return result, time.monotonic() - started, server.generate_requests, probe


def test_gaps_ttft_and_rate():
    result, _, requests, probe = asyncio.run(probe_against(SCRIPT, probe_max_new_tokens=16))
    assert result.success and result.reason == ""
    assert result.tokens == 16  # 8 frames of 2 tokens
    assert len(result.gaps_seconds) == len(GAPS)
    # The simulator sleeps the scripted time; a loaded machine makes a sleep longer,
    # never shorter, and can deliver one frame late (shortening the gap after it
    # by that lag). So: within 50 ms below, and not far above.
    def near(measured: float, scripted: float) -> bool:
        return scripted - 0.05 <= measured <= scripted + 0.25

    assert all(near(m, g) for m, g in zip(result.gaps_seconds, GAPS, strict=True)), \
        result.gaps_seconds
    assert result.max_gap_seconds == max(result.gaps_seconds)
    assert near(result.max_gap_seconds, max(GAPS))
    assert near(result.ttft_seconds, SCRIPT.first_token_seconds)
    # Decode rate: the 14 tokens after the first frame over the gaps they took.
    assert result.decode_tokens_per_second == pytest.approx(
        (16 - 2) / sum(result.gaps_seconds), rel=1e-6)
    cumulative = [count for _, count in probe.gaps.buckets()]
    assert cumulative == sorted(cumulative) and cumulative[-1] == len(GAPS)
    sent = requests[0]
    assert sent["stream"] is True
    assert sent["sampling_params"]["ignore_eos"] is True
    assert sent["sampling_params"]["max_new_tokens"] == 16


def test_stream_hanging_mid_way_ends_at_the_deadline():
    script = StreamScript(first_token_seconds=0.05, default_gap_seconds=0.05, hang_after_frames=3)
    result, elapsed, _, _ = asyncio.run(probe_against(script, probe_timeout_seconds=1.0))
    assert not result.success
    assert "no end of stream within 1 s" in result.reason
    assert elapsed == pytest.approx(1.0, abs=0.2)
    assert result.tokens == 3
    # The gap still open at the deadline is what a client waited: about 1 - 0.15 s.
    assert result.max_gap_seconds == pytest.approx(0.85, abs=0.1)


def test_never_two_probes_at_once():
    async def scenario():
        state = SimEngine(stream=StreamScript(default_gap_seconds=0.05))
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            probe = StreamProbe(lambda: session, engine_config(server.url))
            first = asyncio.create_task(probe.probe_once())
            await asyncio.sleep(0.05)
            with pytest.raises(ProbeBusy):
                await probe.probe_once()
            assert (await first).success
            assert len(server.generate_requests) == 1
            assert server.generate_requests[0]["sampling_params"]["max_new_tokens"] == 32

    asyncio.run(scenario())


def test_default_prompt_is_unique_and_a_configured_one_is_kept():
    assert probe_prompt("") != probe_prompt("")
    assert probe_prompt("hello") == "hello"


def test_probe_families_in_the_exporter():
    async def scenario() -> str:
        state = SimEngine(stream=SCRIPT)
        async with running_sim(state) as server:
            config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                            engines=(engine_config(server.url, probe_interval_seconds=60,
                                                   probe_max_new_tokens=16,
                                                   stall_tracker=False),))
            exporter = Exporter(config)
            await exporter.start()
            try:
                await asyncio.sleep(sum(GAPS) + 0.6)
                return exporter.render(await exporter.snapshot()).decode()
            finally:
                await exporter.close()

    text = asyncio.run(scenario())
    values = {(s.name, s.labels.get("source"), s.labels.get("le")): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert values[("rig_source_up", "probe/main", None)] == 1.0
    assert values[("rig_probe_success", None, None)] == 1.0
    assert values[("rig_probe_max_token_gap_seconds", None, None)] == pytest.approx(0.6, abs=0.05)
    assert values[("rig_probe_token_gap_seconds_count", None, None)] == len(GAPS)
    # Gaps of 0.05 s or less: the scripted 0.05 and three 0.02 (each within 50 ms).
    assert values[("rig_probe_token_gap_seconds_bucket", None, "0.1")] >= 4

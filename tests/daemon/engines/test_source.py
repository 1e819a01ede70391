"""The engine source over real HTTP: good data, bad input, server info, several engines."""

from __future__ import annotations

import asyncio
import logging
import subprocess

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.daemon.engines.source import EngineSource
from exporter.daemon.snapshot import SourceRunner
from exporter.sim.engine.server import load_template, render_metrics
from exporter.sim.engine.state import Fault
from tests.daemon.engines.helpers import engine_config, running_sim, scrape, sim_state

DOWN = [
    (Fault.HTTP_500, "HTTP 500"),
    (Fault.HANG, "no answer within"),
    (Fault.SLOW_BODY, "no answer within"),
    (Fault.TRUNCATED, "cut short"),
    (Fault.REFUSE, "ServerDisconnectedError"),
    (Fault.NON_UTF8, "not UTF-8"),
    (Fault.HUGE, "over the 8388608-byte limit"),
    (Fault.GARBAGE, "not a Prometheus exposition"),
]


@pytest.mark.parametrize(("fault", "reason"), DOWN, ids=[f.value for f, _ in DOWN])
def test_bad_input_is_source_down_with_a_reason(fault, reason, caplog):
    caplog.set_level(logging.WARNING)
    samples, _ = asyncio.run(scrape(sim_state(fault=fault)))
    assert samples[("rig_source_up", "engine/bad", None)] == 0.0
    assert ("rig_engine_running_requests", "bad", None) not in samples
    # The other engine is untouched.
    assert samples[("rig_source_up", "engine/good", None)] == 1.0
    assert samples[("rig_engine_running_requests", "good", None)] == 2.0
    assert any("engine/bad" in r.getMessage() and reason in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_malformed_lines_give_partial_data(caplog):
    caplog.set_level(logging.WARNING)
    samples, _ = asyncio.run(scrape(sim_state(fault=Fault.MALFORMED)))
    assert samples[("rig_source_up", "engine/bad", None)] == 1.0
    # The spoilt running-requests line is the only one (TP rank 0 reports it): absent.
    assert ("rig_engine_running_requests", "bad", None) not in samples
    # The decode-batch line of one TP rank is spoilt; the other rank repeats the count.
    assert samples[("rig_engine_decode_batches_total", "bad", None)] > 0
    assert samples[("rig_engine_queued_requests", "bad", None)] == 1.0
    assert any("partial data" in r.getMessage() and "2 malformed line(s)" in r.getMessage()
               for r in caplog.records)


def test_body_cut_mid_line_gives_partial_data(caplog):
    caplog.set_level(logging.WARNING)
    state = sim_state(fault=Fault.CUT_MID_LINE)
    samples, _ = asyncio.run(scrape(state))
    assert samples[("rig_source_up", "engine/bad", None)] == 1.0
    # What the served part holds: complete lines before the cut.
    body = render_metrics(state, load_template())
    served = body[: int(len(body) * state.cut_at_fraction)].rpartition("\n")[0]
    for family, upstream in (("rig_engine_running_requests", "sglang:num_running_reqs{"),
                             ("rig_engine_cache_hit_tokens_total", "sglang:cached_tokens_total{")):
        present = any(key[:2] == (family, "bad") for key in samples)
        assert present == (upstream in served), family
    assert samples.get(("rig_engine_cache_hit_tokens_total", "bad", "L2")) == 30
    assert any("does not end with a newline" in r.getMessage() for r in caplog.records)


def test_healthy_engine_families_and_info():
    samples, text = asyncio.run(scrape(sim_state()))
    engine = {k: v for k, v in samples.items() if k[1] == "bad"}
    # TP=2 in the simulator: capacity is one rank's value, never doubled.
    assert engine[("rig_engine_kv_capacity_tokens", "bad", None)] == 219005
    assert engine[("rig_engine_cache_hit_tokens_total", "bad", "L2")] == 30
    assert engine[("rig_engine_hicache_host_used_tokens", "bad", None)] == 318900
    info = next(s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "rig_engine_info" and s.labels["engine"] == "bad")
    assert info.labels["version"] == "0.5.23"
    assert info.labels["tp_size"] == "2"
    assert info.labels["hicache"] == "true"
    assert info.labels["kind"] == "sglang"


def test_server_info_falls_back_to_get_server_info():
    async def scenario():
        async with running_sim(sim_state(legacy_info_only=True)) as server:
            source = EngineSource(engine_config(server.url, stall_tracker=False))
            await source.start()
            try:
                for _ in range(50):
                    reading = await source.read()
                    if reading.info is not None:
                        return reading.info
                    await asyncio.sleep(0.02)
            finally:
                await source.close()

    info = asyncio.run(scenario())
    assert info is not None and info.model == "Qwen3.8-27B-W4A16"


def test_unreachable_engine():
    async def scenario():
        source = EngineSource(engine_config("http://127.0.0.1:9", stall_tracker=False))
        await source.start()
        try:
            runner = SourceRunner([source], 2.0)
            return (await runner.snapshot()).results[0]
        finally:
            await source.close()

    result = asyncio.run(scenario())
    assert not result.up
    assert "ClientConnectorError" in (result.error or "")


def test_metrics_are_fetched_uncompressed():
    # SGLang's /metrics gzips for clients that accept it; the exporter's scrapes and
    # 4 Hz tracker polls must not ask, or the engine compresses ~500 kB four times a second.
    async def scenario():
        async with running_sim(sim_state()) as server:
            # A plain aiohttp client asks for gzip, and gets it.
            async with aiohttp.ClientSession() as plain_client, \
                    plain_client.get(server.url + "/metrics") as response:
                assert response.headers["Content-Encoding"] == "gzip"
                assert "sglang:num_running_reqs" in await response.text()
            asked_by_default = server.gzipped_metrics
            source = EngineSource(engine_config(server.url))
            await source.start()
            try:
                await asyncio.sleep(0.6)  # a few tracker polls
                reading = await source.read()
            finally:
                await source.close()
            return asked_by_default, server.gzipped_metrics, reading

    asked_by_default, gzipped, reading = asyncio.run(scenario())
    assert asked_by_default == 1
    assert gzipped == 1  # nothing the exporter sent asked for gzip
    assert reading.metrics.values["running_requests"] == 2


def test_two_engines_pass_promtool_check_metrics():
    # Each engine builds its own rig_engine_* families; the exposition must still name
    # each family once, or Prometheus rejects the whole scrape.
    samples, text = asyncio.run(scrape(sim_state()))
    assert samples[("rig_engine_running_requests", "bad", None)] == 2.0
    assert samples[("rig_engine_running_requests", "good", None)] == 2.0
    assert text.count("# TYPE rig_engine_running_requests gauge") == 1
    check = subprocess.run(["promtool", "check", "metrics"], input=text,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

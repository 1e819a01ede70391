"""The simulated SGLang server speaks SGLang's format and endpoints."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.engine.server import SimServer, load_template, render_metrics
from exporter.sim.engine.state import SimEngine
from tests.daemon.engines.helpers import SGLANG_MULTIPROC


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_fixture_families_names_and_labels():
    clock = [0.0]
    state = SimEngine(clock=lambda: clock[0], hicache_host_used_tokens=1,
                      hicache_host_total_tokens=2, cached_tokens={"device": 5})
    state.running = 1
    state.submit(100, 3, stream=True)
    state.submit(100, 3, stream=False)
    clock[0] = 5.0  # both finish: TTFT has a child per is_streaming, as in the capture
    served = families(render_metrics(state, load_template()))
    fixture = families(SGLANG_MULTIPROC.read_text())
    # Every fixture family the state does not leave untouched is served, same type.
    for name in ("sglang:num_running_reqs", "sglang:token_usage", "sglang:max_total_num_tokens",
                 "sglang:time_to_first_token_seconds", "sglang:per_stage_req_latency_seconds"):
        assert served[name].type == fixture[name].type
        assert ({tuple(sorted(s.labels)) for s in served[name].samples}
                == {tuple(sorted(s.labels)) for s in fixture[name].samples})
    # TP ranks repeat the same counter, as in the capture.
    ranks = {s.labels["tp_rank"]: s.value
             for s in served["sglang:max_total_num_tokens"].samples}
    assert ranks == {"0": 219005.0, "1": 219005.0}


def test_labels_sorted_and_no_created_series():
    text = render_metrics(SimEngine(), load_template())
    assert "_created" not in text
    for line in text.splitlines():
        if "{" in line and not line.startswith("#"):
            names = [pair.split("=")[0] for pair in line[line.index("{") + 1:
                                                         line.rindex("}")].split('",')]
            assert names == sorted(names), line


def test_families_absent_until_touched_and_restart():
    clock = [0.0]
    state = SimEngine(clock=lambda: clock[0], retracted_requests=3)
    text = render_metrics(state, load_template())
    assert "sglang:cuda_graph_passes_total{" not in text.replace("prefill", "")
    assert "sglang:prompt_tokens_total" not in text
    state.running = 2
    clock[0] = 10.0
    state.finish_request(100, 10)
    fams = families(render_metrics(state, load_template()))
    decode = [s.value for s in fams["sglang:cuda_graph_passes"].samples
              if s.labels["mode"].startswith("decode")]
    assert decode == [300.0, 300.0]  # 30 batches/s for 10 s, on both TP ranks
    assert "sglang:num_retracted_requests" in fams
    state.restart()
    text = render_metrics(state, load_template())
    assert "sglang:num_retracted_requests_total" not in text
    assert "sglang:prompt_tokens_total" not in text


def test_pause_holds_decode():
    clock = [0.0]
    state = SimEngine(clock=lambda: clock[0])
    state.running = 1
    clock[0] = 1.0
    state.pause_decode(5.0)
    clock[0] = 5.0
    assert state.decode_batches() == 30
    clock[0] = 7.0
    assert state.decode_batches() == 30 + 30


def test_dp_copies():
    served = families(render_metrics(SimEngine(dp_size=3), load_template()))
    ranks = {s.labels["dp_rank"] for s in served["sglang:max_total_num_tokens"].samples}
    assert ranks == {"0", "1", "2"}


def test_endpoints():
    async def scenario():
        server = SimServer(SimEngine(hicache_storage="file"))
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url + "/health") as r:
                    assert r.status == 200
                for path in ("/server_info", "/get_server_info"):
                    async with session.get(server.url + path) as r:
                        info = await r.json()
                        assert info["version"] == "0.5.23"
                        assert info["hicache_storage_backend"] == "file"
                body = {"text": "hi", "sampling_params": {"max_new_tokens": 3}, "stream": True}
                async with session.post(server.url + "/generate", json=body) as r:
                    frames = [line async for line in r.content if line.strip()]
            assert frames[-1] == b"data: [DONE]\n"
            assert len(frames) == 4  # three one-token frames, then [DONE]
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_loads_are_timed_and_tokenize_stays_in_the_vocabulary():
    """As real SGLang 0.5.23: GET /v1/loads observes get_loads_duration_seconds (from
    the first call on, served or refused), and POST /tokenize gives ids below the
    vocabulary, which the bench takes its prompts' ids from."""
    async def scenario():
        server = SimServer(SimEngine(vocab_size=5000))
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                async def metrics() -> dict:
                    async with session.get(server.url + "/metrics") as r:
                        return families(await r.text())

                assert "sglang:get_loads_duration_seconds" not in await metrics()
                for include in ("core", "nonsense"):
                    async with session.get(server.url + "/v1/loads",
                                           params={"include": include}) as r:
                        assert r.status == (200 if include == "core" else 400)
                loads = (await metrics())["sglang:get_loads_duration_seconds"]
                count = next(s for s in loads.samples if s.name.endswith("_count"))
                assert count.value == 2
                assert set(count.labels) == {"engine_type", "model_name"}
                text = " ".join(f"w{i}" for i in range(3000))
                async with session.post(server.url + "/tokenize", json={"prompt": text}) as r:
                    tokens = (await r.json())["tokens"]
                assert len(tokens) == 3000 and 4000 < max(tokens) < 5000
                async with session.post(server.url + "/tokenize", json={"prompt": 7}) as r:
                    assert r.status == 400
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_runs_as_a_module():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "exporter.sim.engine.server",
                                "--port", str(port)])
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
                    assert b"sglang:num_running_reqs" in response.read()
                    break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(10)

"""rigctl bench against a stand-in engine with a scripted pause and the simulated SGLang."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from exporter.process.launch import free_port
from exporter.rigctl.experiments.starvation import StarvationSettings, run_starvation
from exporter.rigctl.experiments.sweep import SweepSettings, run_sweep
from exporter.sim.engine.scheduler import Timings
from tests.rigctl.experiments.standin import B_TTFT, PAUSE, StandIn

pytestmark = pytest.mark.long_running(43)

REPO = Path(__file__).resolve().parents[3]
# docs/facts/rig.md#decode-starvation: A's longest gap and B's TTFT, in seconds.
OWNER_TABLE = {"default": (47.23, 49.43), "n=1": (4.04, 49.48), "n=4": (13.80, 49.37),
               "mixed-chunk": (3.997, 48.91)}
TIME_SCALE = 10  # simulated seconds per real second
# A loaded 2-core box leaves a process unscheduled for a few tenths of a second (the
# end-to-end rigs' loop lagged up to 0.65 s beside five other workers): at x10 that is
# seconds of rig time, more than 10 % of n=1's 4.04 s gap. The policies' figures still
# fall apart (4.0, 13.8 and 47.2 s, each within 10 % or this).
HICCUP_SECONDS = 0.3


def rigctl(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter.rigctl", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, **kwargs)


@pytest.mark.parametrize("api", ["sglang", "openai"])
def test_scripted_pause_measured_within_a_quarter_second(api: str) -> None:
    async def run():
        standin = StandIn()
        server = TestServer(standin.app(), host="127.0.0.1")
        await server.start_server()
        try:
            return await run_starvation(StarvationSettings(
                engine=str(server.make_url("")), api=api, context_tokens=64,
                delay_seconds=0.3, a_max_tokens=2000))
        finally:
            await server.close()

    result = asyncio.run(run())
    assert abs(result.a_max_gap_seconds - PAUSE) < 0.25
    assert abs(result.b_ttft_seconds - B_TTFT) < 0.25
    assert result.a_p95_gap_seconds <= result.a_max_gap_seconds
    assert result.a_tokens_per_second_before_b > 20
    assert result.engine_version == "stand-in"


@pytest.fixture(scope="module")
def sim_engine():
    """The simulated SGLang at 10x, with no synthetic load of its own."""
    yield from _sim_engine(TIME_SCALE)


@pytest.fixture(scope="module")
def real_time_sim_engine():
    """At 10x a decode step lasts ~1 ms of real time, below what a loaded box can time."""
    yield from _sim_engine(1)


def _sim_engine(time_scale: float):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter.sim.engine.server", "--port", str(port),
         "--running", "0", "--time-scale", str(time_scale)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/server_info", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _state(url: str) -> dict:
    with urllib.request.urlopen(url + "/sim/state", timeout=10) as response:
        return json.load(response)


def test_starvation_on_the_simulated_rig_reproduces_the_owner_table(sim_engine: str,
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "ab.jsonl"
    for policy in OWNER_TABLE:
        _post(sim_engine + "/sim/policy", {"policy": policy})
        # A's context only sets its decode speed; 1K keeps its own prefill short.
        done = rigctl("bench", "starvation", "--engine", sim_engine, "--context-tokens", "65536",
                      "--a-context-tokens", "1024", "--delay", str(5 / TIME_SCALE),
                      "--label", policy, "--out", str(out), "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        expected_gap, expected_ttft = OWNER_TABLE[policy]
        slack = {"rel": 0.10, "abs": HICCUP_SECONDS * TIME_SCALE}
        assert result["a_max_gap_seconds"] * TIME_SCALE == pytest.approx(expected_gap, **slack)
        assert result["b_ttft_seconds"] * TIME_SCALE == pytest.approx(expected_ttft, **slack)
        assert result["engine_flags"]["chunked_prefill_size"] == 4096
    report = rigctl("bench", "report", str(out))
    assert report.returncode == 0
    rows = report.stdout.splitlines()
    assert rows[0].split()[:3] == ["label", "A", "max"]
    assert [row.split()[0] for row in rows[1:]] == list(OWNER_TABLE)
    assert _state(sim_engine)["requests"] == []  # both streams of every run were closed


def test_sweep_itl_follows_the_models_decode_step(real_time_sim_engine: str) -> None:
    result = asyncio.run(run_sweep(SweepSettings(
        engine=real_time_sim_engine, concurrency=(1, 2, 4), context_tokens=1024,
        max_new_tokens=100)))
    timings = Timings()
    for point in result.points:
        c = point.concurrency
        # Every stream gets a token per decode step of the whole batch.
        expected = timings.decode_step_seconds(c, c * (1024 + 50))
        assert point.itl_p50_seconds == pytest.approx(expected, rel=0.25), c
        assert point.decode_tokens_per_second > 0
        assert point.ttft_p50_seconds is not None


def test_unreachable_engine_exits_3_with_one_line() -> None:
    done = rigctl("bench", "starvation", "--engine", f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 3
    assert len(done.stderr.strip().splitlines()) == 1
    assert "not reachable" in done.stderr


def test_context_larger_than_the_context_length_is_refused(sim_engine: str) -> None:
    done = rigctl("bench", "starvation", "--engine", sim_engine, "--context-tokens", "300000")
    assert done.returncode == 3
    assert "exceeds the engine's context length (196608)" in done.stderr
    assert _state(sim_engine)["requests"] == []


def test_both_requests_larger_than_the_kv_pool_are_refused(sim_engine: str) -> None:
    """Each fits the context length; A's and B's together do not fit the pool they share."""
    done = rigctl("bench", "starvation", "--engine", sim_engine, "--context-tokens", "150000")
    assert done.returncode == 3
    assert "A's and B's requests together of 304097 tokens" in done.stderr
    assert "KV pool (max_total_num_tokens 219005)" in done.stderr
    assert _state(sim_engine)["requests"] == []


def test_interrupt_leaves_no_request_running(sim_engine: str) -> None:
    _post(sim_engine + "/sim/policy", {"policy": "default"})
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter.rigctl", "bench", "starvation", "--engine", sim_engine,
         "--a-context-tokens", "1024", "--delay", "0.1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 20
        while len(_state(sim_engine)["requests"]) < 2:  # B is prefilling, A waits
            assert time.monotonic() < deadline, "B never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 130
        deadline = time.monotonic() + 2
        while _state(sim_engine)["requests"]:
            assert time.monotonic() < deadline, _state(sim_engine)["requests"]
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "interrupted" in process.stderr.read()

"""rigctl probe: against the simulated SGLang in-process, and as real processes."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.process.launch import free_port
from exporter.rigctl import main
from exporter.rigctl.commands.probe import print_probe, probe_once
from exporter.sim.engine.state import SimEngine, StreamScript
from tests.daemon.engines.helpers import running_sim

REPO = Path(__file__).resolve().parents[3]


def probe_sim(script: StreamScript, timeout: float = 10.0) -> tuple[str, object]:
    async def scenario():
        async with running_sim(SimEngine(stream=script)) as server:
            return server.url, await probe_once(server.url, 8, timeout, "")

    url, result = asyncio.run(scenario())
    out = io.StringIO()
    print_probe(url, result, out)
    return out.getvalue(), result


def test_prints_ttft_each_gap_and_the_longest() -> None:
    gaps = [0.05, 0.4, 0.05]
    text, result = probe_sim(StreamScript(first_token_seconds=0.1, gaps_seconds=gaps,
                                          default_gap_seconds=0.05, tokens_per_frame=2))
    assert result.success
    lines = text.splitlines()
    assert lines[0].endswith(": ok")
    # Each gap as printed is the one measured; a frame never comes early, while a
    # loaded machine may deliver it late (so no tight upper bound).
    printed_gaps = [float(g) for g in lines[3].split()[2:]]
    assert printed_gaps == [round(g, 3) for g in result.gaps_seconds]
    assert all(scripted - 0.01 <= got < scripted + 2.0
               for got, scripted in zip(printed_gaps, gaps, strict=True))
    assert float(lines[4].split()[2]) == round(max(result.gaps_seconds), 3)
    assert "tokens                      8" in text


def test_hanging_stream_is_reported_as_failed() -> None:
    text, result = probe_sim(StreamScript(default_gap_seconds=0.05, hang_after_frames=2),
                             timeout=0.8)
    assert not result.success
    assert "FAILED: no end of stream within 0.8 s (2 tokens so far)" in text


@pytest.mark.parametrize(("argv", "flag"), [
    (["--engine", "localhost:30000"], "argument --engine: expected an http(s) URL"),
    (["--engine", "http://127.0.0.1:1", "--max-new-tokens", "0"],
     "argument --max-new-tokens: must be greater than 0"),
    (["--engine", "http://127.0.0.1:1", "--timeout", "soon"],
     "argument --timeout: expected a number"),
])
def test_command_line_mistakes_name_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str],
                                              flag: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["probe", *argv])
    assert caught.value.code == 3
    err = capsys.readouterr().err
    assert flag in err
    assert "config key" not in err


def test_missing_command_exits_unknown() -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 3


def test_real_processes_exit_0_then_2_when_the_engine_is_gone() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sim = subprocess.Popen([sys.executable, "-m", "exporter.sim.engine.server",
                            "--port", str(port)], cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    command = [sys.executable, "-m", "exporter.rigctl", "probe",
               "--engine", f"http://127.0.0.1:{port}", "--timeout", "5"]
    try:
        deadline = time.monotonic() + 20
        while True:
            done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # the simulator is still starting
        assert done.returncode == 0, done.stdout + done.stderr
        assert "longest gap" in done.stdout
        # The same stream judged against a starvation threshold under its gaps.
        config = REPO / "tests" / "fixtures" / "rigctl-starved.toml"
        starved = subprocess.run([*command, "--config", str(config)], cwd=REPO, env=env,
                                 capture_output=True, text=True)
        assert starved.returncode == 2, starved.stdout + starved.stderr
        assert "STARVED: the longest gap reached the 0.001 s" in starved.stdout
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    gone = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert gone.returncode == 2
    # The reason once, on the result line; no log line calling the engine "rigctl".
    assert gone.stdout.count("Cannot connect") == 1 and "FAILED" in gone.stdout
    assert gone.stderr == ""

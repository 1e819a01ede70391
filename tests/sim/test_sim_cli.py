"""`python -m exporter.sim` and `rigctl sim` as real processes: the ready lines, the
control endpoint, the phases of a scenario, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from exporter.rigctl import build_parser as rigctl_parser
from exporter.sim.__main__ import build_parser
from exporter.sim.scenarios import SCENARIOS

DEADLINE_SECONDS = 60.0


def start_sim(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-u", "-m", "exporter.sim", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(process: subprocess.Popen[str], predicate) -> list[str]:
    """Lines of stdout until `predicate(line)` holds (bounded by the deadline)."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if predicate(line):
            return lines
    raise AssertionError(f"never saw the line; got {lines}")


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=DEADLINE_SECONDS)
    return out


@pytest.fixture
def sim(tmp_path: Path):
    process = start_sim("--dir", str(tmp_path), "--time-scale", "50")
    try:
        lines = read_until(process, lambda line: line.startswith("{"))
        yield process, json.loads(lines[-1]), lines
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_ready_lines_and_the_files_they_name(sim, tmp_path: Path) -> None:
    process, ready, lines = sim
    assert lines[0].startswith("simulated rig ready: engine http://127.0.0.1:")
    assert set(ready) >= {"engine_url", "sysfs_root", "proc_root", "exporter_args",
                          "control_url", "time_scale", "stall_scale"}
    assert ready["sysfs_root"] == str(tmp_path / "sys")
    assert (Path(ready["proc_root"]) / "meminfo").is_file()
    card2 = Path(ready["sysfs_root"]) / "class" / "drm" / "card2"
    assert (card2 / "device" / "gpu_metrics").exists()
    args = ready["exporter_args"]
    assert args[args.index("--sysfs.root") + 1] == ready["sysfs_root"]
    with urllib.request.urlopen(ready["engine_url"] + "/metrics", timeout=10) as response:
        assert b"sglang:num_running_reqs" in response.read()
    out = stop(process)
    assert process.returncode == 0
    assert "stopping the simulated rig" in out
    # Nothing left behind: the trees are gone, the directory given stays.
    assert list(tmp_path.iterdir()) == []


def test_control_endpoint_changes_the_rig_and_rejects_bad_commands(sim) -> None:
    process, ready, _ = sim
    control = ready["control_url"]
    status, state = post(control + "/cards/card2", {"junction_celsius": 107, "sclk_mhz": 1650})
    assert status == 200
    assert state["cards"]["card2"]["junction_mc"] == 107000
    junction = next(Path(ready["sysfs_root"], "class", "drm", "card2", "device", "hwmon")
                    .iterdir()) / "temp2_input"
    assert junction.read_text().strip() == "107000"
    status, state = post(control + "/engine", {"queued": 3, "running": 0})
    assert (status, state["engine"]["queued"], state["engine"]["running"]) == (200, 3, 0)
    status, state = post(control + "/host", {"cpu_celsius": 93.5})
    assert status == 200
    hwmon = Path(ready["sysfs_root"], "class", "hwmon", "hwmon2", "temp1_input")
    assert hwmon.read_text().strip() == "93500"
    status, state = post(control + "/cards/card2/remove", {})
    assert status == 200 and state["cards"]["card2"]["present"] is False
    assert not Path(ready["sysfs_root"], "class", "drm", "card2").exists()
    for path, body in (("/cards/card9", {}), ("/cards/card1", {"colour": "red"}),
                       ("/engine", {"fault": "melted"}), ("/host", {"cpu_celsius": "hot"}),
                       ("/scenario", {"name": "nope"})):
        status, answer = post(control + path, body)
        assert status == 400 and answer["error"], path
    status, state = post(control + "/scenario", {"name": "healthy"})
    assert (status, state["scenario"]) == (200, "healthy")
    stop(process)
    assert process.returncode == 0


def test_plays_a_scenario_printing_each_phase(tmp_path: Path) -> None:
    process = start_sim("--dir", str(tmp_path), "--scenario", "gpu-missing",
                        "--time-scale", "200", "--exit-at-end")
    try:
        out, err = process.communicate(timeout=DEADLINE_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "lead-in: healthy rig" in out
    assert "[   60.0 s] fault: card2 falls off the bus" in out
    assert "heal: card2 is back" in out
    assert "scenario gpu-missing done" in out
    assert list(tmp_path.iterdir()) == []


def test_list_and_help_name_every_scenario_and_command() -> None:
    listing = subprocess.run([sys.executable, "-m", "exporter.sim", "--list"],
                             capture_output=True, text=True, timeout=DEADLINE_SECONDS)
    assert listing.returncode == 0
    assert [line.split()[0] for line in listing.stdout.splitlines()] == list(SCENARIOS)
    for parser in (build_parser(), rigctl_parser()._subparsers._group_actions[0].choices["sim"]):
        text = parser.format_help()
        for word in ("--scenario", "--time-scale", "--dir", "--list", "/cards/<card>",
                     "/host", "/engine", "exporter_args", *SCENARIOS):
            assert word in text, word


def test_rigctl_sim_stops_on_sigint(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "exporter.rigctl", "sim", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        read_until(process, lambda line: line.startswith("{"))
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=DEADLINE_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert list(tmp_path.iterdir()) == []

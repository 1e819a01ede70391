"""Blind is never zero (docs/stall-tracker.md#when-the-tracker-cannot-see): a real
exporter whose metrics_dir shows it nothing, in front of an engine with two requests
decoding, exports no stall series, says the tracker is down and why (the series'
cause, /api/health, one log line naming the directory), and `rigctl doctor
--exporter` fails its metrics_dir check without the config file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.process.launch import start_exporter
from exporter.sim.engine.state import SimEngine
from tests.scrape import parse_samples, value
from tests.support.checkout import ENV, REPO
from tests.support.process import SimThread

IDS = {"engine": "main", "kind": "sglang"}
STALL_SERIES = ("rig_engine_decode_stall_seconds", "rig_engine_decode_stall_max_seconds",
                "rig_engine_decode_stall_upper_seconds", "rig_engine_decode_stalled_seconds_total")


def empty(directory: Path) -> str:
    return "no_files"


def dead_files(directory: Path) -> str:
    (directory / "counter_999999999.db").write_bytes(b"")
    return "no_live_process"


def files_without_the_gauge(directory: Path) -> str:
    (directory / f"counter_{os.getpid()}.db").write_bytes(b"")
    return "files_without_counters"


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


@pytest.mark.parametrize("make", [empty, dead_files, files_without_the_gauge])
def test_a_metrics_dir_that_shows_nothing_reads_as_unknown(make, tmp_path):
    directory = tmp_path / "prom"
    directory.mkdir()
    cause = make(directory)
    engine = SimEngine()
    engine.running = 2
    with SimThread(engine) as engine_url, start_exporter(
            ["--engine", f"main={engine_url},metrics_dir={directory}",
             "--no-collector.gpu", "--no-collector.host"], tmp_path) as exporter:
        deadline = time.monotonic() + 20
        while True:
            samples = parse_samples(get(exporter.url + "/metrics"))
            up = value(samples, "rig_engine_decode_stall_tracker_up", **IDS, cause=cause)
            if up is not None:
                break
            assert time.monotonic() < deadline, (samples, exporter.log())
            time.sleep(0.2)
        time.sleep(1.0)  # several polls: the line stays one
        samples = parse_samples(get(exporter.url + "/metrics"))
        assert value(samples, "rig_engine_decode_stall_tracker_up", **IDS, cause=cause) == 0.0
        assert value(samples, "rig_source_up", source="engine/main") == 1.0
        for name in STALL_SERIES:
            assert not [k for k in samples if k[0] == name], name
        health = json.loads(get(exporter.url + "/api/health"))
        reasons = [c["reason"] for c in health["checks"]
                   if c["name"] == "decode_starvation" and c["status"] == "unknown"]
        assert any(str(directory) in r and "cannot see" in r for r in reasons), health
        lines = [line for line in exporter.log().splitlines()
                 if "stall tracker cannot see" in line]
        assert len(lines) == 1 and str(directory) in lines[0], exporter.log()

        doctor = subprocess.run(
            [sys.executable, "-m", "exporter.rigctl", "doctor", "--exporter", exporter.url,
             "--watch-seconds", "5", "--json"],
            cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60, check=False)
    checks = {(c["name"], c["subject"]): c for c in json.loads(doctor.stdout)["checks"]}
    check = checks[("metrics_dir", "main")]
    assert check["status"] == "fail" and cause in check["detail"], check
    assert doctor.returncode != 0


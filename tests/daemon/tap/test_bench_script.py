"""bench/bench_tap.py runs end to end on tiny settings: its processes start (nginx
among them with --nginx), every frame comes back, and it prints a row per concurrency
level and relay (figures are not judged here: speed lives in the bench's output, never
in a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("options", "relays"), [
    (["--nginx", "--floor", "--batched"], ["tap", "nginx", "bare-relay"]),
    (["--no-uvloop", "--shape", "native"], ["tap"]),
])
def test_bench_tap_prints_a_row_per_level_and_relay(options, relays):
    done = subprocess.run(
        [sys.executable, "bench/bench_tap.py", "--frames", "20", "--streams", "1,2",
         "--idle-seconds", "0.2", *options],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "exporter on " + ("asyncio" if "--no-uvloop" in options else "uvloop") in lines[0]
    rows = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"])]
    assert [(row[0], row[1]) for row in rows] == [
        (level, relay) for level in ("1", "2") for relay in ("direct", *relays)]
    # direct: its percentiles; a relay: its own, the added ones, CPU, share, load.
    assert all(len(row) == (5 if row[1] == "direct" else 11) for row in rows), rows
    if "--nginx" in options:
        assert any(line.startswith("nginx: nginx version: nginx/") for line in lines)

"""bench/bench_tap.py runs end to end on tiny settings: its three processes start,
every frame comes back, and it prints a row per concurrency level (figures are not
judged here: speed lives in the bench's output, never in a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("options", [["--floor", "--batched"], ["--no-uvloop", "--shape",
                                                                 "native"]])
def test_bench_tap_prints_a_row_per_level(options):
    done = subprocess.run(
        [sys.executable, "bench/bench_tap.py", "--frames", "20", "--streams", "1,2",
         "--idle-seconds", "0.2", *options],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "exporter on " + ("asyncio" if "--no-uvloop" in options else "uvloop") in lines[0]
    rows = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"])]
    assert [row[0] for row in rows] == ["1", "2"]
    assert all(len(row) == (15 if "--floor" in options else 13) for row in rows), rows

"""bench/bench_sim_starvation.py runs end to end for one policy: the simulated server
starts, the starvation experiment runs against it, and the script prints its table
header and a row (figures are not judged here: test_bench checks the experiment's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.sim_starvation import STARVATION_TABLE

REPO = Path(__file__).resolve().parents[3]
ROW = re.compile(r"^\| mixed-chunk \| x20 \| ([\d.]+) s \| ([\d.]+) s \| ([\d.]+) s \| (\d+) \|$")


def test_bench_sim_starvation_prints_a_row_per_policy() -> None:
    done = subprocess.run(
        [sys.executable, "bench/bench_sim_starvation.py", "--time-scale", "20",
         "--policy", "mixed-chunk"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    header, rule, *rows = done.stdout.splitlines()
    assert header.startswith("| policy | scale | A's max gap (client) | B's TTFT (client) |")
    assert rule == "|---|---|---|---|---|---|"
    (row,) = rows
    match = ROW.match(row)
    assert match is not None, row
    assert int(match.group(4)) > 0  # the server decoded A


def test_bench_sim_calibration_prints_every_policy_of_the_table() -> None:
    done = subprocess.run([sys.executable, "bench/bench_sim_calibration.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    _header, _rule, *rows = done.stdout.splitlines()
    assert [row.split(" | ")[0].lstrip("| ") for row in rows] == list(STARVATION_TABLE)

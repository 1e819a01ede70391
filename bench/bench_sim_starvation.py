"""The owner's starvation experiment against a real simulated-server process, over HTTP.

Starts `python -m exporter.sim.engine.server` at a time scale and runs the experiment
`rigctl bench starvation` runs (`exporter.rigctl.experiments.starvation`): A streams
(/generate, a 2,000-token context, decoding), B sends a fresh 64K prompt 5 simulated
seconds after A's first token. It prints, per policy: A's longest gap and B's TTFT
as the client measured them (real seconds times the scale; the model's own figures
are `tests.support.sim_starvation.STARVATION_TABLE`), the server process's CPU time
per simulated minute (from /proc/<pid>/stat), which says how fast a time scale the
machine can keep up with, and the decode batches the server ran.

    python3 bench/bench_sim_starvation.py [--time-scale 20] [--policy default n=1 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import urllib.request

from loopback import start_sim_engine

from exporter.rigctl.experiments.starvation import StarvationSettings, run_starvation

A_CONTEXT_TOKENS = 2000
B_PROMPT_TOKENS = 65536
B_DELAY_SECONDS = 5.0  # simulated, from A's first token


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def decode_batches(url: str) -> int:
    with urllib.request.urlopen(url + "/sim/state", timeout=10) as response:
        return json.load(response)["counters"]["decode_batches"]


def run(policy: str, scale: float) -> None:
    server, url = start_sim_engine("--running", "0", "--policy", policy,
                                   "--time-scale", str(scale))
    with server:
        pid = server.popen.pid
        settings = StarvationSettings(engine=url, context_tokens=B_PROMPT_TOKENS,
                                      a_context_tokens=A_CONTEXT_TOKENS,
                                      delay_seconds=B_DELAY_SECONDS / scale)
        cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
        result = asyncio.run(run_starvation(settings))
        cpu = cpu_seconds(pid) - cpu_before
        simulated = (time.monotonic() - wall_before) * scale
        assert result.a_max_gap_seconds is not None and result.b_ttft_seconds is not None
        print(f"| {policy} | x{scale:g} | {result.a_max_gap_seconds * scale:.2f} s "
              f"| {result.b_ttft_seconds * scale:.2f} s | {cpu / simulated * 60:.2f} s "
              f"| {decode_batches(url)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--policy", nargs="+", default=["default", "n=1", "n=4", "mixed-chunk"])
    args = parser.parse_args()
    print("| policy | scale | A's max gap (client) | B's TTFT (client) "
          "| server CPU per simulated minute | decode batches |\n|---|---|---|---|---|---|")
    for policy in args.policy:
        run(policy, args.time_scale)


if __name__ == "__main__":
    main()

"""The owner's starvation experiment against a real simulated-server process, over HTTP.

Starts `python -m exporter.sim.engine.server` at a time scale, streams A (/generate,
a 2,000-token prompt, decoding), sends B (a fresh 64K prompt) 5 simulated seconds
later, and prints, per policy: A's longest gap and B's TTFT as the client measured
them (real seconds times the scale) next to the model's simulated figures, and the
server process's CPU time per simulated minute (from /proc/<pid>/stat), which says
how fast a time scale the machine can keep up with.

    python3 bench/bench_sim_starvation.py [--time-scale 20] [--policy default n=1 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def generate_body(prompt: int, wanted: int) -> bytes:
    # Encoded before the clock starts: json.dumps of 64K ids takes ~80 ms here, time
    # in which this client's loop would not read A's frames (1.6 s simulated at x20).
    return json.dumps({"input_ids": [7] * prompt, "stream": True,
                       "sampling_params": {"max_new_tokens": wanted,
                                           "ignore_eos": True}}).encode()


async def stream(session: aiohttp.ClientSession, url: str, body: bytes,
                 arrivals: list[float]) -> None:
    async with session.post(url + "/generate", data=body,
                            headers={"Content-Type": "application/json"}) as response:
        async for line in response.content:
            if line.startswith(b"data: {"):
                arrivals.append(time.monotonic())


async def experiment(url: str, scale: float) -> tuple[float, float, dict]:
    async with aiohttp.ClientSession() as session:
        a_frames: list[float] = []
        b_body = generate_body(65536, 1)
        a = asyncio.create_task(stream(session, url, generate_body(2000, 10**6), a_frames))
        while not a_frames:
            await asyncio.sleep(0.01)
        await asyncio.sleep(5.0 / scale)
        sent = time.monotonic()
        b_frames: list[float] = []
        await stream(session, url, b_body, b_frames)
        await asyncio.sleep(1.0 / scale)
        a.cancel()
        await asyncio.gather(a, return_exceptions=True)
        await asyncio.sleep(0.2)
        async with session.get(url + "/sim/state") as response:
            state = await response.json()
    gaps = [(y - x) * scale for x, y in zip(a_frames, a_frames[1:], strict=False)]
    return max(gaps), (b_frames[0] - sent) * scale, state


def run(policy: str, scale: float) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "exporter.sim.engine.server", "--port",
                               str(port), "--running", "0", "--policy", policy,
                               "--time-scale", str(scale)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        cpu_before, wall_before = cpu_seconds(server.pid), time.monotonic()
        gap, ttft, state = asyncio.run(experiment(url, scale))
        cpu = cpu_seconds(server.pid) - cpu_before
        simulated = (time.monotonic() - wall_before) * scale
        print(f"| {policy} | x{scale:g} | {gap:.2f} s | {ttft:.2f} s "
              f"| {cpu / simulated * 60:.2f} s | {state['counters']['decode_batches']} |")
    finally:
        server.terminate()
        server.wait(10)


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

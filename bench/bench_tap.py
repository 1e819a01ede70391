"""What the stream tap adds to each frame, and what it costs the host.

    python bench/bench_tap.py [--frames 500] [--rate 100] [--streams 1,4,16] [--shape chat]

Three processes on loopback: a stand-in engine (a child) that streams `--frames`
frames per request at `--rate` frames/s, each stamped with its CLOCK_MONOTONIC send
time; the real exporter (a child, `python -m exporter`) with a tap in front of that
engine and nothing else to do (no GPU, host or stall tracker); and this process, the
clients. For each concurrency it streams once straight to the engine and once through
the tap, and takes each frame's latency from its stamp to its arrival. The tap's added
latency is the tapped percentile minus the direct one. Its CPU is the exporter
process's CPU time (/proc/<pid>/stat utime+stime) over the tapped run, per 1,000
frames and as a share of one core; the timing code alone (no network) is measured in
this process for comparison. Targets (issue #12): p99 added under 2 ms; under
2 % of a core at 16 streams x 100 frames/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loopback import free_port, wait_ready  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the stand-in engine
def frame(shape: str, index: int) -> bytes:
    sent = time.monotonic()
    if shape == "native":
        body = {"text": " tok" * (index + 1), "output_ids": list(range(index + 1)),
                "meta_info": {"completion_tokens": index + 1, "cached_tokens": 0, "sent": sent}}
    else:
        body = {"id": "b", "object": "chat.completion.chunk", "sent": sent,
                "choices": [{"index": 0, "delta": {"content": " tok"}}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def stream(request: web.Request) -> web.StreamResponse:
    asked = await request.json()
    frames, interval, shape = asked["frames"], 1.0 / asked["rate"], asked["shape"]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    started = time.monotonic()
    for i in range(frames):
        # Paced on an absolute schedule so a late frame does not delay the rest.
        await asyncio.sleep(max(0.0, started + i * interval - time.monotonic()))
        await response.write(frame(shape, i))
    await response.write(b"data: [DONE]\n\n")
    return response


def serve_engine(port: int) -> None:
    app = web.Application()
    for path in ("/generate", "/v1/chat/completions"):
        app.router.add_post(path, stream)
    app.router.add_get("/health", lambda _: web.Response(text="ok"))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ------------------------------------------------------------------ the clients
async def one_stream(session: aiohttp.ClientSession, url: str, frames: int, rate: float,
                     shape: str, latencies: list[float]) -> int:
    path = "/generate" if shape == "native" else "/v1/chat/completions"
    got = 0
    async with session.post(url + path, json={"frames": frames, "rate": rate, "shape": shape,
                                              "stream": True}) as response:
        async for line in response.content:
            now = time.monotonic()
            if not line.startswith(b"data: {"):
                continue
            body = json.loads(line[6:])
            sent = body["meta_info"]["sent"] if shape == "native" else body["sent"]
            latencies.append(now - sent)
            got += 1
    return got


async def run(url: str, streams: int, frames: int, rate: float, shape: str) -> list[float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        counts = await asyncio.gather(*(one_stream(session, url, frames, rate, shape, latencies)
                                        for _ in range(streams)))
    if sum(counts) != streams * frames:
        raise SystemExit(f"lost frames: {sum(counts)} of {streams * frames}")
    return latencies


def timing_cost(shape: str, frames: int = 20_000) -> float:
    """CPU seconds per frame of the tap's timing alone (exporter.tap.state, in this
    process, no network): the part of the tap's cost that is not moving bytes."""
    from exporter.tap.state import TapState

    state = TapState()
    stream = state.open(time.monotonic())
    payloads = [frame(shape, i % 100) for i in range(100)]
    started = time.process_time()
    for i in range(frames):
        state.chunk(stream, payloads[i % 100])
    return (time.process_time() - started) / frames


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=500, help="frames per stream")
    parser.add_argument("--rate", type=float, default=100.0, help="frames/s per stream")
    parser.add_argument("--streams", default="1,4,16", help="concurrency levels")
    parser.add_argument("--shape", choices=("chat", "native"), default="chat")
    parser.add_argument("--serve-engine", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine(args.serve_engine)
        return
    engine_port, tap_port, exporter_port = free_port(), free_port(), free_port()
    engine = subprocess.Popen([sys.executable, __file__, "--serve-engine", str(engine_port)])
    exporter = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--no-collector.gpu", "--no-collector.host",
         "--web.listen-address", f"127.0.0.1:{exporter_port}", "--log.level", "warning",
         "--engine", f"main=http://127.0.0.1:{engine_port},stall_tracker=false,"
                     f"tap_listen_address=127.0.0.1:{tap_port}"], cwd=ROOT)
    try:
        wait_ready(f"http://127.0.0.1:{engine_port}/health", engine)
        wait_ready(f"http://127.0.0.1:{exporter_port}/-/healthy", exporter)
        direct, tapped = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{tap_port}"
        asyncio.run(run(tapped, 1, 50, args.rate, args.shape))  # warm up both paths
        print(f"{args.shape} frames, {args.frames} per stream at {args.rate:g}/s; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print(f"timing alone (parse + gap timer + histograms): "
              f"{timing_cost(args.shape) * 1e6:.1f} us CPU per frame")
        print("streams  direct p50/p99 ms  tapped p50/p99 ms  added p50/p99 ms  "
              "tap CPU ms/1000 frames  tap CPU % of a core")
        for streams in (int(s) for s in args.streams.split(",")):
            base = asyncio.run(run(direct, streams, args.frames, args.rate, args.shape))
            cpu_before, wall_before = cpu_seconds(exporter.pid), time.monotonic()
            through = asyncio.run(run(tapped, streams, args.frames, args.rate, args.shape))
            cpu = cpu_seconds(exporter.pid) - cpu_before
            wall = time.monotonic() - wall_before
            d50, d99 = (percentile(base, q) * 1000 for q in (0.5, 0.99))
            t50, t99 = (percentile(through, q) * 1000 for q in (0.5, 0.99))
            print(f"{streams:7d}  {d50:7.3f} / {d99:7.3f}  {t50:7.3f} / {t99:7.3f}  "
                  f"{t50 - d50:6.3f} / {t99 - d99:6.3f}  "
                  f"{cpu * 1e6 / len(through):21.1f}  {cpu / wall * 100:18.2f}")
    finally:
        for process in (exporter, engine):
            process.terminate()
            process.wait(timeout=10)


if __name__ == "__main__":
    main()

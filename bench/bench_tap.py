"""What the stream tap adds to each frame, and what it costs the host, beside nginx.

    python bench/bench_tap.py [--frames 500] [--rate 100] [--streams 1,4,16] [--shape chat]
                              [--repeat 1] [--no-uvloop] [--nginx] [--floor] [--batched]

Processes on loopback: a stand-in engine (a child) that streams `--frames` frames per
request at `--rate` frames/s, each stamped with its CLOCK_MONOTONIC send time; the real
exporter (a child, `python -m exporter`) with a tap in front of that engine and nothing
else to do (no GPU, host or stall tracker); with `--nginx`, nginx (the system's binary,
one process, its own configuration in a temporary directory) as a streaming reverse
proxy in front of the same engine (`proxy_buffering off`, HTTP/1.1 with keep-alive to
the engine); with `--floor`, a bare Python TCP relay; and this process, the clients. For
each concurrency it streams straight to the engine, then through each relay, `--repeat`
times, in the same run, and takes each frame's latency from its stamp to its arrival. A
relay's added latency is its percentile minus the direct one.

A relay's CPU is its process's CPU time (/proc/<pid>/stat utime+stime) over its run,
less what it spends idle over the same time (measured first, printed apart: for the
exporter, the engine source polling the stand-in, which answers 404), per 1,000 frames
and as a share of one core; the median of the repeats. The timing code alone (no
network) is measured in this process for comparison, for one stream and for 16 streams
of four configured agents (the per-agent accounting). `--no-uvloop` runs the exporter
(and the bare relay) on asyncio's loop even where uvloop is installed. `--batched` sends
every stream's frames on one shared clock, as SGLang's decode steps give each running
request its token at once; by default each stream keeps its own clock, and the frames
of 16 streams rarely arrive together. Targets (docs/performance.md#the-stream-tap): p99
added under 2 ms; under 2 % of a core at 16 streams x 100 frames/s.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.process.launch import Process, free_port, start_exporter, wait_ready  # noqa: E402
from tests.support.event_loop import exporter_python  # noqa: E402

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
    if asked.get("batched"):
        # On the next tick of a clock shared by every stream, as SGLang's decode steps
        # give each running request its token at once: the frames arrive together.
        started = (started // interval + 1) * interval
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


# ------------------------------------------------------------------ the floor
class ClientSide(asyncio.Protocol):
    """The floor's client connection: its bytes go to the engine once connected."""

    def __init__(self, engine_port: int) -> None:
        self.engine_port = engine_port
        self.transport: asyncio.Transport | None = None
        self.engine: EngineSide | None = None
        self.held: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport
        loop = asyncio.get_running_loop()
        loop.create_task(loop.create_connection(lambda: EngineSide(self), "127.0.0.1",
                                                self.engine_port))

    def data_received(self, data: bytes) -> None:
        if self.engine is None or self.engine.transport is None:
            self.held.append(data)
        else:
            self.engine.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.engine is not None and self.engine.transport is not None:
            self.engine.transport.close()


class EngineSide(asyncio.Protocol):
    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport
        self.client.engine = self
        for data in self.client.held:
            transport.write(data)

    def data_received(self, data: bytes) -> None:
        assert self.client.transport is not None
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        assert self.client.transport is not None
        self.client.transport.close()


def serve_floor(listen_port: int, engine_port: int) -> None:
    """The least a Python relay costs here: bytes in, bytes out; no HTTP, no timing. On
    the loop the exporter would use (exporter.process.event_loop)."""
    from exporter.process import event_loop

    async def main() -> None:
        await asyncio.get_running_loop().create_server(lambda: ClientSide(engine_port),
                                                       "127.0.0.1", listen_port)
        await asyncio.Event().wait()

    event_loop.run(main())


# ------------------------------------------------------------------ nginx
NGINX_CONF = """\
daemon off;
master_process off;  # one process: its CPU is one pid's
worker_processes 1;
error_log {tmp}/error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream engine {{ server 127.0.0.1:{engine_port}; keepalive 32; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


def start_nginx(binary: str, port: int, engine_port: int, tmp: Path) -> Process:
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, engine_port=engine_port))
    return Process("nginx", [binary, "-p", str(tmp), "-e", str(tmp / "error.log"),
                             "-c", str(conf)], tmp / "nginx.log")


# ------------------------------------------------------------------ the clients
async def one_stream(session: aiohttp.ClientSession, url: str, frames: int, rate: float,
                     shape: str, latencies: list[float], batched: bool) -> int:
    path = "/generate" if shape == "native" else "/v1/chat/completions"
    got = 0
    async with session.post(url + path, json={"frames": frames, "rate": rate, "shape": shape,
                                              "batched": batched, "stream": True}) as response:
        async for line in response.content:
            now = time.monotonic()
            if not line.startswith(b"data: {"):
                continue
            body = json.loads(line[6:])
            sent = body["meta_info"]["sent"] if shape == "native" else body["sent"]
            latencies.append(now - sent)
            got += 1
    return got


async def run(url: str, streams: int, frames: int, rate: float, shape: str,
              batched: bool = False) -> list[float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        counts = await asyncio.gather(*(one_stream(session, url, frames, rate, shape, latencies,
                                                   batched) for _ in range(streams)))
    if sum(counts) != streams * frames:
        raise SystemExit(f"lost frames: {sum(counts)} of {streams * frames}")
    return latencies


def timing_cost(shape: str, frames: int = 20_000) -> float:
    """CPU seconds per frame of the tap's timing alone (exporter.daemon.tap.state, in this
    process, no network): the part of the tap's cost that is not moving bytes."""
    from exporter.daemon.tap.state import TapState

    state = TapState()
    stream = state.open(time.monotonic())
    payloads = [frame(shape, i % 100) for i in range(100)]
    started = time.process_time()
    for i in range(frames):
        state.chunk(stream, payloads[i % 100])
    return (time.process_time() - started) / frames


def agents_timing_cost(shape: str, streams: int = 16, frames: int = 20_000) -> float:
    """The same at `streams` streams at once, each of one of four configured agents
    (docs/tap.md#agents): the per-agent tallies, the waiting marks and, every 100th
    frame of a stream, a 1.5 s stall that is blamed on whoever waits."""
    from multidict import CIMultiDict

    from exporter.config import AgentConfig
    from exporter.daemon.tap.asks import StreamAsk
    from exporter.daemon.tap.state import TapState

    clock = [time.monotonic()]
    agents = tuple(AgentConfig(f"agent{i}", header_name="X-Agent", header_value=f"agent{i}")
                   for i in range(4))
    state = TapState(lambda: clock[0], agents=agents)
    live = []
    for i in range(streams):
        ask = StreamAsk("/v1/chat/completions")
        ask.feed(b'{"stream": true, "max_tokens": 512}')
        flight = state.begin(clock[0], ask, CIMultiDict({"X-Agent": f"agent{i % 5}"}), None)
        state.named(flight)
        live.append(state.open(clock[0], flight))
    payloads = [frame(shape, i % 100) for i in range(100)]
    started = time.process_time()
    for i in range(frames):
        clock[0] += 1.5 if i % (100 * streams) == 0 else 0.01 / streams
        state.chunk(live[i % streams], payloads[(i // streams) % 100])
    cost = (time.process_time() - started) / frames
    state.reading("sglang", "main")
    return cost


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def measured(url: str, pid: int, streams: int,
             args: argparse.Namespace) -> tuple[list[float], float, float]:
    """One run through the relay at `url`: latencies, the relay's CPU seconds, wall seconds."""
    cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
    latencies = asyncio.run(run(url, streams, args.frames, args.rate, args.shape,
                                args.batched))
    return latencies, cpu_seconds(pid) - cpu_before, time.monotonic() - wall_before


@dataclass
class Relay:
    """One way to the engine, measured: the tap, nginx, the bare relay (or none: direct)."""

    name: str
    url: str
    process: Process | None = None
    #: CPU seconds per second with no traffic, subtracted from its runs.
    idle: float = 0.0
    latencies: list[float] = field(default_factory=list)
    per_frame: list[float] = field(default_factory=list)
    share: list[float] = field(default_factory=list)

    def measure(self, streams: int, args: argparse.Namespace) -> None:
        if self.process is None:
            self.latencies += asyncio.run(run(self.url, streams, args.frames, args.rate,
                                              args.shape, args.batched))
            return
        latencies, cpu, wall = measured(self.url, self.process.popen.pid, streams, args)
        cpu -= self.idle * wall
        self.latencies += latencies
        self.per_frame.append(cpu / len(latencies))
        self.share.append(cpu / wall)


def idle_cpu_per_second(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU seconds per second with no traffic, over the same seconds."""
    before, started = [cpu_seconds(pid) for pid in pids], time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    return [(cpu_seconds(pid) - cpu) / wall for pid, cpu in zip(pids, before, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=500, help="frames per stream")
    parser.add_argument("--rate", type=float, default=100.0, help="frames/s per stream")
    parser.add_argument("--streams", default="1,4,16", help="concurrency levels")
    parser.add_argument("--shape", choices=("chat", "native"), default="chat")
    parser.add_argument("--repeat", type=int, default=1, help="runs per concurrency level")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="how long the relays' idle CPU is measured")
    parser.add_argument("--no-uvloop", action="store_true",
                        help="run the exporter on asyncio's loop even if uvloop is installed")
    parser.add_argument("--batched", action="store_true",
                        help="every stream's frames on one shared clock, as decode steps are")
    parser.add_argument("--nginx", nargs="?", const=shutil.which("nginx") or "/usr/sbin/nginx",
                        metavar="BINARY",
                        help="also time nginx as a streaming reverse proxy (default binary: "
                             "the one on PATH)")
    parser.add_argument("--floor", action="store_true",
                        help="also time a bare TCP relay (no HTTP, no timing) for scale")
    parser.add_argument("--serve-engine", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine(args.serve_engine)
        return
    if args.serve_floor:
        if args.no_uvloop:
            sys.modules["uvloop"] = None  # type: ignore[assignment]
        serve_floor(*args.serve_floor)
        return
    engine_port, tap_port = free_port(), free_port()
    engine = Process("stand-in engine",
                     [sys.executable, __file__, "--serve-engine", str(engine_port)], None)
    exporter = start_exporter(
        ["--no-collector.gpu", "--no-collector.host", "--log.level", "warning",
         "--engine", f"main=http://127.0.0.1:{engine_port},stall_tracker=false,"
                     f"tap_listen_address=127.0.0.1:{tap_port}"],
        None, wait=False, python=exporter_python(not args.no_uvloop))
    # What exporter.process.event_loop picks in the child.
    loop = "uvloop" if not args.no_uvloop and importlib.util.find_spec("uvloop") else "asyncio"
    direct = Relay("direct", f"http://127.0.0.1:{engine_port}")
    relays = [Relay("tap", f"http://127.0.0.1:{tap_port}", exporter)]
    children: list[Process] = [exporter, engine]
    with tempfile.TemporaryDirectory(prefix="bench-tap-nginx-") as tmp:
        try:
            if args.nginx:
                port = free_port()
                relays.append(Relay("nginx", f"http://127.0.0.1:{port}",
                                    start_nginx(args.nginx, port, engine_port, Path(tmp))))
            if args.floor:
                port = free_port()
                relays.append(Relay("bare relay", f"http://127.0.0.1:{port}", Process(
                    "bare relay", [sys.executable, __file__, "--serve-floor", str(port),
                                   str(engine_port)] + (["--no-uvloop"] if args.no_uvloop
                                                        else []), None)))
            children += [r.process for r in relays[1:] if r.process is not None]
            wait_ready(f"{direct.url}/health", engine)
            exporter.wait_ready()
            for relay in relays[1:]:
                assert relay.process is not None
                wait_ready(f"{relay.url}/health", relay.process)
            for relay in relays:  # warm up every path
                asyncio.run(run(relay.url, 1, 50, args.rate, args.shape))
            idle = idle_cpu_per_second([r.process.popen.pid for r in relays if r.process],
                                       args.idle_seconds)
            for relay, cpu in zip(relays, idle, strict=True):
                relay.idle = cpu
            report(args, loop, relays, direct)
        finally:
            for process in children:
                process.stop()


def report(args: argparse.Namespace, loop: str, relays: list[Relay], direct: Relay) -> None:
    print(f"{args.shape} frames, {args.frames} per stream at {args.rate:g}/s"
          f"{', batched' if args.batched else ''}, "
          f"{args.repeat} run(s) each; exporter on {loop}; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    if args.nginx:
        version = subprocess.run([args.nginx, "-v"], capture_output=True, text=True)
        print(f"nginx: {version.stderr.strip()}, one process, proxy_buffering off")
    for relay in relays:
        print(f"{relay.name} idle: {relay.idle * 1000:.2f} ms CPU per second "
              f"({relay.idle * 100:.3f} % of a core), subtracted below")
    print(f"timing alone (parse + gap timer + histograms): "
          f"{timing_cost(args.shape) * 1e6:.1f} us CPU per frame")
    print(f"timing alone at 16 streams of 4 agents (+ agent tallies, waits, blame): "
          f"{agents_timing_cost(args.shape) * 1e6:.1f} us CPU per frame")
    print("streams  relay       p50/p99 ms         added p50/p99 ms   "
          "CPU ms/1000 frames  CPU % of a core  load")
    for streams in (int(s) for s in args.streams.split(",")):
        for relay in (direct, *relays):
            relay.latencies, relay.per_frame, relay.share = [], [], []
        for _ in range(args.repeat):
            for relay in (direct, *relays):
                relay.measure(streams, args)
        d50, d99 = (percentile(direct.latencies, q) * 1000 for q in (0.5, 0.99))
        print(f"{streams:7d}  {'direct':10s}  {d50:7.3f} / {d99:7.3f}")
        for relay in relays:
            r50, r99 = (percentile(relay.latencies, q) * 1000 for q in (0.5, 0.99))
            print(f"{streams:7d}  {relay.name.replace(' ', '-'):10s}  {r50:7.3f} / {r99:7.3f}  "
                  f"{r50 - d50:7.3f} / {r99 - d99:7.3f}  "
                  f"{statistics.median(relay.per_frame) * 1e6:18.1f}  "
                  f"{statistics.median(relay.share) * 100:15.2f}  {os.getloadavg()[0]:4.1f}")


if __name__ == "__main__":
    main()

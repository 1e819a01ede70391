"""Benchmark: /metrics latency and RSS of the exporter, side by side with node_exporter.

The exporter runs as a real process reading two fixture cards, this machine's
/proc, and one simulated SGLang engine (TP=2, `--dp-size` 3: a ~3,000-line
multiprocess body) in its own child process. Sequential scrapes over loopback
give the median and p99 latency and the RSS afterwards; Debian's
prometheus-node-exporter, if installed, is measured the same way in the same run
(targets: our median no slower than node_exporter's, p99 under 50 ms).

Beside it, the cost to the engine: the simulated SGLang's CPU seconds per wall
second while the exporter runs (its 4 Hz stall tracker included), against the
same engine left alone.

    python bench/bench_metrics.py [--scrapes 300] [--dp-size 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request

import psutil
from loopback import ROOT, start_node_exporter, start_sim_engine

from exporter.process.launch import Process, start_exporter

FIXTURE = ROOT / "tests" / "fixtures" / "sys"


def exporter_args(engine_url: str | None) -> list[str]:
    args = ["--sysfs.root", str(FIXTURE), "--gpu.backend", "sysfs", "--log.level", "warning"]
    return args + (["--engine", f"main={engine_url}"] if engine_url else [])


def cpu_seconds(process: Process) -> float:
    times = psutil.Process(process.popen.pid).cpu_times()
    return times.user + times.system


def measure(process: Process, url: str, scrapes: int) -> dict[str, float]:
    """Sequential scrapes of `url`, served by `process`."""
    for _ in range(10):  # warm-up: imports, first reads, thread pool
        urllib.request.urlopen(url).read()
    latencies = []
    size = 0
    for _ in range(scrapes):
        started = time.perf_counter()
        size = len(urllib.request.urlopen(url).read())
        latencies.append(time.perf_counter() - started)
    latencies.sort()
    return {
        "median_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "rss_mb": psutil.Process(process.popen.pid).memory_info().rss / 1e6,
        "bytes": size,
    }


def engine_cpu_share(engine: Process, seconds: float, url: str | None = None) -> float:
    """The engine's CPU seconds per wall second, with an exporter at `url` scraped every
    15 s if given."""
    cpu, wall = cpu_seconds(engine), time.monotonic()
    next_scrape = wall
    while time.monotonic() - wall < seconds:
        if url is not None and time.monotonic() >= next_scrape:
            urllib.request.urlopen(url).read()
            next_scrape += 15.0
        time.sleep(0.05)
    return (cpu_seconds(engine) - cpu) / (time.monotonic() - wall)


def report(name: str, figures: dict[str, float]) -> None:
    print(f"{name:<16} median {figures['median_ms']:7.2f} ms   p99 {figures['p99_ms']:7.2f} ms"
          f"   RSS {figures['rss_mb']:6.1f} MB   body {figures['bytes']:6d} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--dp-size", type=int, default=3)
    parser.add_argument("--engine-seconds", type=float, default=20.0,
                        help="how long to watch the engine's CPU, alone and with the exporter")
    args = parser.parse_args()

    engine, engine_url = start_sim_engine("--dp-size", str(args.dp_size))
    with engine:
        with urllib.request.urlopen(engine_url + "/metrics") as response:
            print(f"engine body: {len(response.read().splitlines())} lines")
        with start_exporter(exporter_args(engine_url), None) as exporter:
            ours = measure(exporter, exporter.url + "/metrics", args.scrapes)
        report("rig-exporter", ours)
        alone = engine_cpu_share(engine, args.engine_seconds)
        with start_exporter(exporter_args(engine_url), None) as exporter:
            watched = engine_cpu_share(engine, args.engine_seconds, exporter.url + "/metrics")
        print(f"engine CPU: {alone * 100:.2f} % of a core alone, {watched * 100:.2f} % with the "
              f"exporter (tracker + a scrape every 15 s): +{(watched - alone) * 100:.2f} points")
    node_exporter = start_node_exporter()
    if node_exporter is None:
        print("node_exporter not installed: no comparison")
        return
    theirs_process, url = node_exporter
    with theirs_process:
        theirs = measure(theirs_process, url, args.scrapes)
    report("node_exporter", theirs)
    ratio = ours["median_ms"] / theirs["median_ms"]
    print(f"median ratio rig-exporter / node_exporter: {ratio:.2f}")


if __name__ == "__main__":
    main()

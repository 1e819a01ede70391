"""Benchmark: the exporter under load, and its memory over a long steady run.

    python bench/bench_load.py [--clients 50] [--seconds 30] [--rss-minutes 10]

1. Load: `--clients` concurrent scrapers hit /metrics back to back for `--seconds`
   (two fixture cards, the host, one simulated SGLang engine of ~3,000 lines).
   Reports requests, errors, p50/p99 latency, and the CPU the engine and the
   exporter spent meanwhile (concurrent scrapes share one source read).
2. Memory: one scrape a second for `--rss-minutes`; RSS sampled every 10 s.
3. node_exporter under the same load, for comparison, when installed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import urllib.request

import aiohttp
import psutil
from bench_metrics import cpu_seconds, exporter_args
from loopback import start_node_exporter, start_sim_engine

from exporter.process.launch import Process, start_exporter


async def load(url: str, clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def scraper(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                async with session.get(url) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                        continue
            except aiohttp.ClientError:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(scraper(session) for _ in range(clients)))
    latencies.sort()
    return {
        "requests": len(latencies), "errors": errors,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def rss_run(process: Process, url: str, minutes: float) -> list[float]:
    samples = []
    started = time.monotonic()
    next_sample = started
    while time.monotonic() - started < minutes * 60:
        urllib.request.urlopen(url).read()
        if time.monotonic() >= next_sample:
            samples.append(psutil.Process(process.popen.pid).memory_info().rss / 1e6)
            next_sample += 10
        time.sleep(1.0)
    samples.append(psutil.Process(process.popen.pid).memory_info().rss / 1e6)
    return samples


def report(name: str, figures: dict[str, float], seconds: float) -> None:
    print(f"{name:<14} {figures['requests']:6d} scrapes in {seconds:g} s "
          f"({figures['requests'] / seconds:6.1f}/s), {figures['errors']} errors, "
          f"p50 {figures['p50_ms']:7.2f} ms, p99 {figures['p99_ms']:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rss-minutes", type=float, default=10.0)
    args = parser.parse_args()

    engine, engine_url = start_sim_engine("--dp-size", "3")
    with engine, start_exporter(exporter_args(engine_url), None) as exporter:
        url = exporter.url + "/metrics"
        engine_cpu = cpu_seconds(engine)
        exporter_cpu = cpu_seconds(exporter)
        ours = asyncio.run(load(url, args.clients, args.seconds))
        report("rig-exporter", ours, args.seconds)
        engine_share = (cpu_seconds(engine) - engine_cpu) / args.seconds
        exporter_share = (cpu_seconds(exporter) - exporter_cpu) / args.seconds
        print(f"  during the load: engine CPU {engine_share * 100:.1f} % of a core, "
              f"exporter CPU {exporter_share * 100:.1f} %")
        if args.rss_minutes > 0:
            rss = rss_run(exporter, url, args.rss_minutes)
            print(f"  RSS over {args.rss_minutes:g} min at 1 scrape/s: first {rss[0]:.1f} MB, "
                  f"last {rss[-1]:.1f} MB, max {max(rss):.1f} MB ({len(rss)} samples)")

    node_exporter = start_node_exporter()
    if node_exporter is None:
        print("node_exporter not installed: no comparison")
        return
    theirs_process, url = node_exporter
    with theirs_process:
        report("node_exporter", asyncio.run(load(url, args.clients, args.seconds)), args.seconds)


if __name__ == "__main__":
    main()

"""Benchmark: what /api/health costs beside /metrics, and what judging costs.

1. A real exporter process on the two fixture cards, this machine's /proc and a
   simulated SGLang server (its own process): the median and p99 latency of
   sequential /metrics and /api/health requests over loopback. Both read one
   snapshot (the same path, tested in tests/daemon/health/test_api.py), so the
   difference is the judging and the JSON.
2. In process: the CPU time of one HealthMonitor.observe (history and every
   check) on a snapshot of one engine, two cards and the host, with a full
   30-minute history at the default 5 s spacing.

    python bench/bench_health.py [--requests 200]

Figures on a loaded 2-core machine are noisy; compare them side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request

from loopback import ROOT, start_sim_engine

from exporter.process.launch import start_exporter

sys.path.insert(0, str(ROOT))  # tests.support.rig_readings, for the in-process half
FIXTURE = ROOT / "tests" / "fixtures" / "sys"


def timed(urls: list[str], requests: int) -> dict[str, list[float]]:
    """Alternate between the URLs, so that the machine's load falls on each alike."""
    latencies: dict[str, list[float]] = {url: [] for url in urls}
    for _ in range(requests):
        for url in urls:
            started = time.perf_counter()
            urllib.request.urlopen(url).read()
            latencies[url].append(time.perf_counter() - started)
    return {url: sorted(values) for url, values in latencies.items()}


def over_http(requests: int) -> None:
    sim, sim_url = start_sim_engine()
    # No stall tracker and no sampler: every engine read below is a request's own.
    with sim, start_exporter(
            ["--sysfs.root", str(FIXTURE), "--gpu.backend", "sysfs", "--health.sample-interval",
             "0", "--engine", f"main={sim_url},stall_tracker=false", "--log.level", "error"],
            None) as exporter:
        paths = ["/metrics", "/api/health"]
        urls = [exporter.url + p for p in paths]
        timed(urls, 10)  # warm-up
        for path, latencies in zip(paths, timed(urls, requests).values(), strict=True):
            print(f"{path:<12} median {statistics.median(latencies) * 1000:7.2f} ms"
                  f"   p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:7.2f} ms")


def in_process(rounds: int) -> None:
    from tests.support.rig_readings import Rig, Watch, card, engine, probe

    watch = Watch()
    rig = Rig(engines=[engine(hicache_host_capacity_tokens=319193.0,
                              hicache_host_used_tokens=200000.0,
                              hicache_evicted_tokens_total=1.0,
                              hicache_loaded_back_tokens_total=1.0)],
              probes=[probe()], cards=[card("card1"), card("card2")])
    t = 0.0
    while t < 1900:  # fill the 30-minute windows at the 5 s spacing
        watch._observe(t, rig)
        t += 5
    started = time.process_time()
    for i in range(rounds):
        watch._observe(t + i * 5, rig)
    per = (time.process_time() - started) / rounds
    samples = sum(len(s) for s in watch.monitor.history._series.values())
    print(f"observe      {per * 1000:7.3f} ms CPU per snapshot judged "
          f"({len(watch.monitor.report.checks)} checks, {samples} history samples held)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    over_http(args.requests)
    in_process(200)


if __name__ == "__main__":
    main()

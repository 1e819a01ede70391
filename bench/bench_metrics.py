"""Benchmark: /metrics latency and RSS of the exporter on two fixture cards plus host.

Starts the exporter as a real process (fixture sysfs tree, this machine's /proc),
sends sequential scrapes over loopback and reports the median and p99 latency and
the process's RSS afterwards. If Debian's prometheus-node-exporter is installed,
the same measurement runs against it for comparison (target: our median is no
slower than node_exporter's, and our RSS stays under 60 MB).

    python bench/bench_metrics.py [--scrapes 300]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
from loopback import free_port, wait_ready

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "sys"


def measure(command: list[str], url: str, scrapes: int) -> dict[str, float]:
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, process)
        for _ in range(10):  # warm-up: imports, first reads, thread pool
            urllib.request.urlopen(url).read()
        latencies = []
        size = 0
        for _ in range(scrapes):
            started = time.perf_counter()
            size = len(urllib.request.urlopen(url).read())
            latencies.append(time.perf_counter() - started)
        latencies.sort()
        rss = psutil.Process(process.pid).memory_info().rss
        return {
            "median_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
            "rss_mb": rss / 1e6,
            "bytes": size,
        }
    finally:
        process.terminate()
        process.wait(timeout=10)


def report(name: str, figures: dict[str, float]) -> None:
    print(f"{name:<16} median {figures['median_ms']:7.2f} ms   p99 {figures['p99_ms']:7.2f} ms"
          f"   RSS {figures['rss_mb']:6.1f} MB   body {figures['bytes']:6d} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300)
    args = parser.parse_args()

    port = free_port()
    ours = measure(
        [sys.executable, "-m", "exporter", "--web.listen-address", f"127.0.0.1:{port}",
         "--sysfs.root", str(FIXTURE), "--gpu.backend", "sysfs", "--log.level", "warning"],
        f"http://127.0.0.1:{port}/metrics", args.scrapes,
    )
    report("rig-exporter", ours)

    node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if node_exporter is None:
        print("node_exporter not installed: no comparison")
        return
    port = free_port()
    theirs = measure([node_exporter, f"--web.listen-address=127.0.0.1:{port}"],
                     f"http://127.0.0.1:{port}/metrics", args.scrapes)
    report("node_exporter", theirs)
    ratio = ours["median_ms"] / theirs["median_ms"]
    print(f"median ratio rig-exporter / node_exporter: {ratio:.2f}")


if __name__ == "__main__":
    main()

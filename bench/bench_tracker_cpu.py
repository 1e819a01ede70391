"""The exporter's CPU share with one engine under 4 Hz stall tracking.

    python bench/bench_tracker_cpu.py [--seconds 20] [--dp-size 5]

The simulated SGLang runs in a child process (its CPU is not counted), serving TP=2
with `--dp-size` DP groups: 5 gives a ~3,500-line exposition. In this process an
Exporter with that one engine runs its stall tracker at 4 Hz and is scraped every
15 s, as Prometheus would. The figure is this process's CPU time over the wall time
(target: under 2 % of one core).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loopback import start_sim_engine  # noqa: E402

from exporter.config import Config, EngineConfig, GpuConfig, HostConfig  # noqa: E402
from exporter.daemon.runtime import Exporter  # noqa: E402

SCRAPE_INTERVAL_SECONDS = 15.0


async def measure(url: str, seconds: float) -> tuple[float, int]:
    config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                    engines=(EngineConfig(name="main", url=url),))
    exporter = Exporter(config)
    await exporter.start()
    try:
        await asyncio.sleep(1.0)  # warm up: connections, first info read
        cpu_started, wall_started = time.process_time(), time.monotonic()
        scrapes = 0
        while time.monotonic() - wall_started < seconds:
            exporter.render(await exporter.snapshot())
            scrapes += 1
            await asyncio.sleep(min(SCRAPE_INTERVAL_SECONDS,
                                    seconds - (time.monotonic() - wall_started)))
        share = (time.process_time() - cpu_started) / (time.monotonic() - wall_started)
        return share, scrapes
    finally:
        await exporter.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--dp-size", type=int, default=5)
    args = parser.parse_args()
    server, url = start_sim_engine("--dp-size", str(args.dp_size))
    with server:
        body = urllib.request.urlopen(url + "/metrics").read()
        print(f"exposition: {len(body.splitlines())} lines, {len(body)} bytes")
        share, scrapes = asyncio.run(measure(url, args.seconds))
        print(f"exporter CPU: {share * 100:.2f} % of one core over {args.seconds:g} s "
              f"(4 Hz tracking, {scrapes} scrapes)")


if __name__ == "__main__":
    main()

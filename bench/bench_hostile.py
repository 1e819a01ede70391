"""Benchmark: what hostile clients cost the exporter and its honest scraper.

    python bench/bench_hostile.py [--idle 1100] [--flood 400] [--at-a-time 200] [--cost 12]

1. Idle connections: `--idle` connections that never finish a request (half send
   a partial head, half nothing) against an exporter started at systemd's soft
   limit of 1,024 open files (hard 4,096), while a kept-alive scraper scrapes
   back to back: the share of its scrapes with gpu and host up, its p99, new
   clients served meanwhile, when the last idle connection was closed, and the
   exporter's CPU, open descriptors and RSS.
2. A password flood: `--flood` distinct wrong passwords, `--at-a-time` at once,
   against basic auth at bcrypt cost `--cost`, while an authenticated kept-alive
   scraper runs: its p99 before and during, the share with gpu and host up, the
   flood's answers, and the CPU seconds the exporter spent.
3. User enumeration: on a fresh exporter with no scraper, the median time of a wrong
   password for the real user and for an unknown one, interleaved (each password
   new, so nothing is remembered).

The exporter reads the fixture cards and this machine's /proc. To measure another
checkout's exporter, put its directory first on PYTHONPATH: the child imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import bcrypt
import psutil
from bench_metrics import cpu_seconds
from loopback import ROOT

sys.path.insert(0, str(ROOT))  # tests.hardening.hostile: the clients the tests use

from exporter.process.launch import start_exporter  # noqa: E402
from tests.hardening.hostile import (  # noqa: E402
    Scraper,
    basic_auth,
    open_idle,
    p99,
    password_flood,
    share,
    wait_closed,
)

FIXTURE = ROOT / "tests" / "fixtures" / "sys"
ARGS = ["--sysfs.root", str(FIXTURE), "--gpu.backend", "sysfs", "--log.level", "warning"]
USER, PASSWORD = "prometheus", "correct horse battery staple"
ENUMERATION_SAMPLES = 15


def served(url: str, authorization: str | None = None) -> bool:
    request = urllib.request.Request(url + "/metrics")
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200
    except OSError:
        return False


def idle_connections(count: int, log_dir: Path) -> None:
    with start_exporter(ARGS, log_dir, open_files=(1024, 4096)) as exporter, \
            Scraper(exporter.url) as scraper:
        process = psutil.Process(exporter.popen.pid)
        cpu = cpu_seconds(exporter)
        start = len(scraper.scrapes)
        idle = open_idle("127.0.0.1", int(exporter.address.rsplit(":", 1)[1]), count)
        opened = time.monotonic()
        time.sleep(3)
        descriptors, rss = process.num_fds(), process.memory_info().rss / 1e6
        new = [served(exporter.url) for _ in range(5)]
        during = scraper.since(start)
        closed, last = wait_closed(idle, seconds=60)
        cpu = cpu_seconds(exporter) - cpu
    print(f"idle connections: {len(idle)} open against soft 1024 / hard 4096 open files")
    print(f"  kept-alive scraper: {len(during)} scrapes, gpu and host up in "
          f"{share(during, 'gpu', 'host') * 100:.0f} %, p99 "
          f"{p99([s.seconds for s in during]) * 1000:.0f} ms, {scraper.connects} connection(s)")
    print(f"  new clients served meanwhile: {sum(new)}/{len(new)}")
    still_open = f"{len(idle) - closed} still open after 60 s" if closed < len(idle) else (
        f"the last closed {last - opened:.1f} s after all were open")
    print(f"  idle connections closed by the exporter: {closed}, {still_open}")
    print(f"  exporter: {descriptors} open descriptors and {rss:.0f} MB RSS 3 s in, "
          f"{cpu:.1f} CPU-seconds in all")


async def _timed(url: str, user: str, password: str) -> float:
    started = time.perf_counter()
    await password_flood(url, user, 1, 1, prefix=password)
    return time.perf_counter() - started


def password_flood_and_enumeration(count: int, at_a_time: int, cost: int,
                                   log_dir: Path) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=cost)).decode()
    web_config = log_dir / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    with start_exporter([*ARGS, "--web.config.file", str(web_config)], log_dir) as exporter, \
            Scraper(exporter.url, basic_auth(USER, PASSWORD)) as scraper:
        time.sleep(3)
        quiet = list(scraper.scrapes)
        cpu = cpu_seconds(exporter)
        start = len(scraper.scrapes)
        began = time.monotonic()
        flood = asyncio.run(password_flood(exporter.url, USER, count, at_a_time))
        took = time.monotonic() - began
        during = scraper.since(start)
        time.sleep(2)  # checks still queued finish
        cpu = cpu_seconds(exporter) - cpu
        print(f"password flood: {count} wrong passwords, {at_a_time} at a time, "
              f"bcrypt cost {cost}, over {took:.1f} s: {dict(flood.statuses)}")
        print(f"  authenticated scraper: p99 {p99([s.seconds for s in quiet]) * 1000:.0f} ms "
              f"before, {p99([s.seconds for s in during]) * 1000:.0f} ms during; gpu and host "
              f"up in {share(during, 'gpu', 'host') * 100:.0f} % of {len(during)} scrapes")
        print(f"  exporter CPU: {cpu:.1f} CPU-seconds for the flood and its tail")
    with start_exporter([*ARGS, "--web.config.file", str(web_config)], log_dir) as exporter:
        real, unknown = [], []
        for i in range(ENUMERATION_SAMPLES):  # interleaved, so that load drifts alike
            real.append(asyncio.run(_timed(exporter.url, USER, f"guess-{i}")))
            unknown.append(asyncio.run(_timed(exporter.url, f"nobody{i}", "guess")))
    print(f"user enumeration: wrong password for {USER} {statistics.median(real) * 1000:.1f}"
          f" ms, for an unknown user {statistics.median(unknown) * 1000:.1f} ms "
          f"(medians of {ENUMERATION_SAMPLES}, interleaved)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1100)
    parser.add_argument("--flood", type=int, default=400)
    parser.add_argument("--at-a-time", type=int, default=200)
    parser.add_argument("--cost", type=int, default=12)
    args = parser.parse_args()
    print(f"exporter from: {os.environ.get('PYTHONPATH') or 'this checkout'}")
    with tempfile.TemporaryDirectory() as log_dir:
        idle_connections(args.idle, Path(log_dir))
        password_flood_and_enumeration(args.flood, args.at_a_time, args.cost, Path(log_dir))


if __name__ == "__main__":
    main()

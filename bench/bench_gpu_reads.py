"""Benchmark: how often the exporter reads the amdgpu files under many scrapers.

    python bench/bench_gpu_reads.py [--clients 50] [--seconds 10] [--max-age 1]

An exporter on the two-card fixture tree (the GPU source alone) takes `--clients`
back-to-back scrapers for `--seconds` while `perf stat` counts its openat calls (a
kernel tracepoint: the exporter runs at full speed, unlike under strace). One GPU
read opens a fixed set of files, counted on a single scrape first, so opens per
second over opens per read is full reads per second. `--max-age` is
`[gpu] reading_max_age_seconds`; 0 rereads on every snapshot, as before the reading
was kept (docs/gpu.md#how-often-the-card-files-are-read).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_load import load

from exporter.config import GpuConfig
from exporter.process.launch import start_exporter

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sys"


def openat_calls(pid: int, seconds: float, during=None) -> int:
    """openat calls by `pid`'s threads over `seconds` (or while `during()` runs)."""
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-e", "syscalls:sys_enter_openat",
                             "-p", str(pid), "--", "sleep", str(seconds)],
                            stderr=subprocess.PIPE, text=True)
    if during is not None:
        during()
    _, err = perf.communicate()
    match = re.search(r"^(\d+),,syscalls:sys_enter_openat", err, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"perf stat said: {err.strip()}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-age", type=float, default=None,
                        help="[gpu] reading_max_age_seconds (default: the exporter's)")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("needs perf (Debian: linux-perf)")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "rig.toml"
        config.write_text("" if args.max_age is None
                          else f"[gpu]\nreading_max_age_seconds = {args.max_age}\n")
        shutil.copytree(FIXTURE, Path(tmp) / "sys", symlinks=True)
        with start_exporter(["--config.file", str(config), "--sysfs.root", f"{tmp}/sys",
                             "--gpu.backend", "sysfs", "--no-collector.host"], None) as exporter:
            url = exporter.url + "/metrics"
            asyncio.run(load(url, args.clients, 1.0))  # the thread pool is up before counting
            pid = exporter.popen.pid
            per_read = openat_calls(pid, 1.5, lambda: _one_scrape_after_max_age(url, args))
            result: dict = {}
            opens = openat_calls(pid, args.seconds, lambda: result.update(
                asyncio.run(load(url, args.clients, args.seconds - 0.5))))
    reads = opens / per_read
    age = "default" if args.max_age is None else f"{args.max_age:g} s"
    print(f"max age {age}, {args.clients} scrapers, {args.seconds:g} s: "
          f"{result['requests']} scrapes ({result['requests'] / args.seconds:.0f}/s, "
          f"p99 {result['p99_ms']:.1f} ms); {opens} openat = {reads:.0f} GPU reads "
          f"({reads / args.seconds:.1f}/s) at {per_read} files per read")


def _one_scrape_after_max_age(url: str, args: argparse.Namespace) -> None:
    # The kept reading is too old after this: the scrape reads the files. (An exporter
    # without the key rereads on every snapshot.)
    age = getattr(GpuConfig, "reading_max_age_seconds", 0.0) if args.max_age is None \
        else args.max_age
    time.sleep(age + 0.1)
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()


if __name__ == "__main__":
    main()

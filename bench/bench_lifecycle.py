"""Reloads under streaming load, and stops with a sysfs read blocked.

    .venv/bin/python bench/bench_lifecycle.py [--reloads 20] [--streams 4] [--stops 5]

1. A simulated SGLang (decoding at 30 tokens/s a stream) behind the stream tap of a
   real exporter. `--streams` clients stream completions through the tap one after
   another, a scraper reads /metrics without pause, and the exporter gets `--reloads`
   SIGHUPs 0.5 s apart with its config unchanged. Prints the streams that completed,
   were cut or refused, the scrapes that failed and those that saw the tap down.
2. `--stops` times: an exporter whose GPU read is blocked on a FIFO (a card in reset)
   gets SIGTERM; prints the time to exit and the exit status (a process still alive
   after 15 s is killed and counted as such).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
from loopback import ROOT, start_sim_engine

from exporter.process.launch import free_port, start_exporter

FIXTURE_SYSFS = ROOT / "tests" / "fixtures" / "sys"
TOKENS = 100


async def streamer(session: aiohttp.ClientSession, tap: str, until: asyncio.Event,
                   outcomes: dict[str, int]) -> None:
    body = {"prompt": "hi", "max_tokens": TOKENS, "stream": True}
    while not until.is_set():
        try:
            async with session.post(tap + "/v1/completions", json=body) as response:
                text = await response.read()
            done = response.status == 200 and text.rstrip().endswith(b"data: [DONE]")
            outcomes["completed" if done else "cut"] += 1
        except aiohttp.ClientConnectorError:
            outcomes["refused"] += 1
            await asyncio.sleep(0.05)
        except aiohttp.ClientError:
            outcomes["cut"] += 1


async def scraper(session: aiohttp.ClientSession, url: str, until: asyncio.Event,
                  outcomes: dict[str, int]) -> None:
    while not until.is_set():
        try:
            async with session.get(url + "/metrics") as response:
                text = await response.text()
            outcomes["scrapes"] += 1
            if response.status != 200:
                outcomes["scrapes failed"] += 1
            elif 'rig_source_up{source="tap/main"} 1.0' not in text:
                outcomes["scrapes with the tap down"] += 1
        except aiohttp.ClientError:
            outcomes["scrapes failed"] += 1
        await asyncio.sleep(0.05)


async def reloads_under_load(reloads: int, streams: int) -> dict[str, int]:
    engine, engine_url = start_sim_engine("--running", "0")
    tap_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "rig.toml"
        config.write_text("[gpu]\nenabled = false\n[host]\nenabled = false\n"
                          f'[[engine]]\nname = "main"\nurl = "{engine_url}"\n'
                          f'tap_listen_address = "127.0.0.1:{tap_port}"\n')
        exporter = start_exporter(["--config.file", str(config)], Path(tmp))
        outcomes = dict.fromkeys(("completed", "cut", "refused", "scrapes", "scrapes failed",
                                  "scrapes with the tap down"), 0)
        until = asyncio.Event()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
                tasks = [asyncio.create_task(streamer(s, f"http://127.0.0.1:{tap_port}",
                                                      until, outcomes))
                         for _ in range(streams)]
                tasks.append(asyncio.create_task(scraper(s, exporter.url, until, outcomes)))
                await asyncio.sleep(1.0)
                for _ in range(reloads):
                    exporter.popen.send_signal(signal.SIGHUP)
                    await asyncio.sleep(0.5)
                await asyncio.sleep(1.0)
                until.set()
                await asyncio.gather(*tasks)
        finally:
            exporter.stop()
            engine.stop()
        log = exporter.log()
        outcomes["reloads logged"] = log.count("SIGHUP: config reloaded")
        outcomes["'cannot listen' lines"] = log.count("cannot listen")
        return outcomes


def stop_with_a_read_blocked() -> tuple[float, int | None]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sys"
        shutil.copytree(FIXTURE_SYSFS, root, symlinks=True)
        fifo = (root / "class" / "drm" / "card1" / "device").resolve() / "gpu_metrics"
        fifo.unlink()
        os.mkfifo(fifo)
        exporter = start_exporter(["--sysfs.root", str(root), "--gpu.backend", "sysfs",
                                   "--no-collector.host", "--web.scrape-deadline", "0.5"],
                                  None)
        with urllib.request.urlopen(exporter.url + "/metrics", timeout=30) as response:
            response.read()  # the GPU read is now blocked on the FIFO
        started = time.monotonic()
        exporter.popen.send_signal(signal.SIGTERM)
        try:
            status: int | None = exporter.popen.wait(15)
        except Exception:
            status = None
        took = time.monotonic() - started
        exporter.stop()
        return took, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--stops", type=int, default=5)
    args = parser.parse_args()
    if args.reloads:
        figures = asyncio.run(reloads_under_load(args.reloads, args.streams))
        print(f"{args.reloads} SIGHUPs, config unchanged, {args.streams} streams of "
              f"{TOKENS} tokens through the tap:")
        print(json.dumps(figures, indent=2))
    for _ in range(args.stops):
        took, status = stop_with_a_read_blocked()
        shown = "still alive, killed" if status is None else f"exit status {status}"
        print(f"SIGTERM with a GPU read blocked: {took:.2f} s, {shown}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

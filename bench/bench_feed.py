"""The forward-pass feed's cost to the exporter: CPU per message taken and judged.

    python3 bench/bench_feed.py [--messages 20000] [--rate 2000]

A publisher process (tests/support/fpm_publisher.py, what SGLang 0.5.23's scheduler
sends) sends decode passes at `--rate` a second; the exporter's subscriber and state
machine (exporter/daemon/engines/stall/feed.py, feed_stalls.py) take them in this
process. Prints the messages taken, those lost, and this process's CPU time (every
thread: the event loop and ZMQ's I/O thread) per message, less an idle baseline of
the same wall time. On the engine's side SGLang's publisher thread encodes and sends
whether anyone subscribes or not; a subscriber adds the delivery by ZMQ's I/O thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporter.daemon.engines.stall.feed import FeedSubscriber, rank_endpoint  # noqa: E402
from exporter.daemon.engines.stall.feed_stalls import FeedStalls  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


async def measure(messages: int, rate: float) -> dict:
    workdir = tempfile.TemporaryDirectory(prefix="fpm-bench-")
    base = f"ipc://{workdir.name}/fpm"
    script = [["decode", messages, 1.0 / rate]]
    publisher = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fpm_publisher", base, json.dumps(script)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert publisher.stdout is not None and publisher.stdin is not None
    publisher.stdout.readline()
    stalls = FeedStalls()
    subscriber = FeedSubscriber(rank_endpoint(base), stalls.observe, "bench")
    task = asyncio.create_task(subscriber.run())
    await asyncio.sleep(1.0)
    idle_cpu = time.process_time()
    idle_wall = time.monotonic()
    await asyncio.sleep(2.0)
    idle_rate = (time.process_time() - idle_cpu) / (time.monotonic() - idle_wall)
    cpu, wall = time.process_time(), time.monotonic()
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    while subscriber.received + stalls.dropped < messages and time.monotonic() - wall < 120:
        await asyncio.sleep(0.05)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    task.cancel()
    publisher.kill()
    subscriber.close()
    workdir.cleanup()
    taken = subscriber.received
    return {"messages_taken": taken, "messages_lost": stalls.dropped,
            "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 3),
            "cpu_us_per_message": round((cpu - idle_rate * wall) / max(taken, 1) * 1e6, 1),
            "cpu_share_of_a_core": round(cpu / wall, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=2000.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.messages, args.rate)), indent=2))


if __name__ == "__main__":
    main()

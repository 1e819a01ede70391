"""What the benchmarks share beside `exporter.process.launch` (the exporter, the free port,
waiting for a server): the simulated SGLang server and node_exporter as children."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from exporter.process.launch import Process, free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent


def start_sim_engine(*options: str) -> tuple[Process, str]:
    """`python -m exporter.sim.engine.server OPTIONS` (TP=2) on a free port, serving;
    `--dp-size 3` serves ~3,000 lines."""
    port = free_port()
    process = Process("simulated SGLang", [sys.executable, "-m", "exporter.sim.engine.server",
                                           "--port", str(port), *options], None)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/metrics", process)
    return process, url


def start_node_exporter() -> tuple[Process, str] | None:
    """Debian's prometheus-node-exporter on a free port, serving; None if not installed."""
    path = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if path is None:
        return None
    port = free_port()
    process = Process("node_exporter", [path, f"--web.listen-address=127.0.0.1:{port}"], None)
    url = f"http://127.0.0.1:{port}/metrics"
    wait_ready(url, process)
    return process, url

"""What the benchmarks share: a free loopback port, waiting for a server to answer,
and the simulated SGLang server in a child process."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen, timeout: float = 20) -> bytes:
    """The first body `url` answers with, while `process` (the server) keeps running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args[0]} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read()
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} not ready after {timeout} s")


def start_sim_engine(dp_size: int = 3) -> tuple[subprocess.Popen, str]:
    """The simulated SGLang (TP=2) in a child process; dp_size 3 serves ~3,000 lines."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter.sim.engine.server", "--port", str(port),
         "--dp-size", str(dp_size)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/metrics", process)
    return process, url

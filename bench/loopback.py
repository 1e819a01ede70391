"""What the benchmarks share: a free loopback port, and waiting for a server to answer."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request


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

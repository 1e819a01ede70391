"""Run `rig-exporter` as a real process on a free loopback port, and always stop it."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.scrape import free_port

REPO = Path(__file__).resolve().parent.parent


@dataclass
class ExporterProcess:
    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()


def wait_until_serving(url: str, process: subprocess.Popen, log_path: Path,
                       context: ssl.SSLContext | None = None, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url + "/-/healthy", timeout=2, context=context)
            return
        except urllib.error.HTTPError:
            return  # it answers: 401 behind basic auth still means it serves
        except OSError:
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, f"no answer in {timeout} s:\n{log_path.read_text()}"
            time.sleep(0.05)


@contextmanager
def exporter_process(tmp_path: Path, *args: str, scheme: str = "http",
                     context: ssl.SSLContext | None = None,
                     wait: bool = True) -> Iterator[ExporterProcess]:
    port = free_port()
    log_path = tmp_path / f"exporter-{port}.log"
    with open(log_path, "w") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--web.listen-address", f"127.0.0.1:{port}",
             *args],
            cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    url = f"{scheme}://127.0.0.1:{port}"
    try:
        if wait:
            wait_until_serving(url, process, log_path, context)
        yield ExporterProcess(process, url, log_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

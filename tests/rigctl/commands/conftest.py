"""Fixtures for rigctl as real processes: a canned exporter, the simulated SGLang
server, and a way to run a command line in bash."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from exporter.process.launch import Process, free_port, wait_ready
from tests.rigctl.commands.canned import exporter_answering, hot_report
from tests.support.checkout import ENV, REPO

RIGCTL = f"{sys.executable} -m exporter.rigctl"
RIG_EXPORTER = f"{sys.executable} -m exporter"


@dataclass(frozen=True)
class Ended:
    """How a command line ended: its exit status, stdout and stderr."""

    status: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def bash(command: str, timeout: float = 120) -> Ended:
    """`command` in bash with pipefail, so a pipeline's status is the first
    command's when it failed (head itself exits 0)."""
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return Ended(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def critical_exporter() -> Iterator[str]:
    """An /api/health that says critical: `rigctl health` exits 2."""
    with exporter_answering(hot_report()) as url:
        yield url


@pytest.fixture(scope="module")
def sim_engine() -> Iterator[str]:
    """The simulated SGLang server as a process of its own, at real time."""
    port = free_port()
    process = Process("simulated SGLang", [sys.executable, "-m", "exporter.sim.engine.server",
                                           "--port", str(port)], None, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url + "/health", process)
        yield url
    finally:
        process.stop()

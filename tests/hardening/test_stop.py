"""A stop is a stop: SIGTERM or SIGINT ends the exporter within 2 s, with status 0, even
while a sysfs read is blocked in the kernel (a GPU in reset; here a FIFO stands in for
the file), and the log names the read it left behind (docs/deploy.md#stopping)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.process.launch import free_port, start_exporter
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from tests.support.event_loop import exporter_python
from tests.support.process import SimThread
from tests.support.sysfs_tree import card_device

STOP_BOUND_SECONDS = 2.0


@contextlib.contextmanager
def blocking_gpu_metrics(sysfs_root: Path, blocked_in: str) -> Iterator[Path]:
    """card1's gpu_metrics as a FIFO. `open`: nobody writes, so open() blocks; `read`:
    the test holds the write end without writing, so open() returns and read() blocks,
    as a sysfs read does while the driver waits on a GPU in reset."""
    path = card_device(sysfs_root, "card1") / "gpu_metrics"
    path.unlink()
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR | os.O_NONBLOCK) if blocked_in == "read" else None
    try:
        yield path
    finally:
        if writer is not None:
            os.close(writer)


def _scrape(url: str) -> None:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        response.read()


SIGNALS = (("SIGTERM",), ("SIGINT",), ("SIGTERM", "SIGTERM"), ("SIGTERM", "SIGINT"))
# Every case on uvloop (installed with the `fast` extra), two on asyncio's own loop,
# whose close joins the default executor's threads.
STOPS = [(blocked_in, signals, True) for blocked_in in ("open", "read") for signals in SIGNALS]
STOPS += [("read", ("SIGTERM",), False), ("open", ("SIGINT", "SIGINT"), False)]


@pytest.mark.parametrize(("blocked_in", "signals", "uvloop"), STOPS, ids=[
    f"{b}-{'+'.join(s)}-{'uvloop' if u else 'asyncio'}" for b, s, u in STOPS])
def test_a_stop_with_a_sysfs_read_blocked_exits_in_time_and_names_the_read(
        sysfs_root: Path, tmp_path: Path, blocked_in: str, signals: tuple[str, ...],
        uvloop: bool) -> None:
    with blocking_gpu_metrics(sysfs_root, blocked_in) as fifo, start_exporter(
        ["--sysfs.root", str(sysfs_root), "--gpu.backend", "sysfs", "--no-collector.host",
         "--web.scrape-deadline", "0.5", "--health.sample-interval", "0"], tmp_path,
        python=exporter_python(uvloop),
    ) as exporter:
        _scrape(exporter.url)  # the GPU read is now stuck on the FIFO, past its deadline
        started = time.monotonic()
        for name in signals:
            exporter.popen.send_signal(getattr(signal, name))
            time.sleep(0.2)
        status = exporter.popen.wait(timeout=15)
        took = time.monotonic() - started
    log = exporter.log()
    assert took < STOP_BOUND_SECONDS, f"stopped after {took:.1f} s:\n{log}"
    assert status == 0, log
    abandoned = next((line for line in log.splitlines()
                      if f"abandoning GPU read under {sysfs_root}" in line
                      or f"abandoned GPU read under {sysfs_root}" in line), "")
    assert abandoned.endswith(f"/{fifo.name}"), log
    assert "Traceback" not in log, log


def test_a_normal_stop_closes_every_source(tmp_path: Path, sysfs_root: Path) -> None:
    write_proc(tmp_path / "proc", HostSpec())
    tap = f"127.0.0.1:{free_port()}"
    with SimThread(SimEngine()) as engine_url, start_exporter(
        ["--sysfs.root", str(sysfs_root), "--gpu.backend", "sysfs",
         "--proc.root", str(tmp_path / "proc"), "--engine", f"main={engine_url}",
         "--tap.listen-address", f"main={tap}"], tmp_path,
    ) as exporter:
        _scrape(exporter.url)
        exporter.popen.send_signal(signal.SIGTERM)
        status = exporter.popen.wait(timeout=15)
    log = exporter.log()
    assert status == 0, log
    assert "stopped: every source closed" in log, log
    for sign_of_a_dirty_stop in ("abandoned", "Unclosed", "Task was destroyed", "Traceback"):
        assert sign_of_a_dirty_stop not in log, log


WATCHED_EXIT = """
import concurrent.futures, logging, sys
from exporter.process.stopping import StopWatch
logging.basicConfig(level="INFO", format="%(message)s")
pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="stuck")
pool.submit(lambda: open(sys.argv[1]).read())  # blocks: nobody writes the FIFO
StopWatch(0.5).arm()
"""


def test_the_stop_deadline_ends_an_exit_that_waits_on_a_stuck_pool_thread(
        tmp_path: Path) -> None:
    """What Python 3.11 does at exit, joining every thread pool's workers without a
    timeout, meets the stop's deadline."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    child = subprocess.run([sys.executable, "-c", WATCHED_EXIT, str(fifo)], timeout=15,
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert "exiting now, abandoning thread stuck_0" in child.stderr, child.stderr

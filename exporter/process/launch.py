"""Start a real `rig-exporter` on loopback and wait until it serves: the one launcher
of `rigctl demo`, the tests and the benchmarks, with the free port and the child
process they share.

A child runs in its own session (process group) with its output in a log file, and
`stop` ends its group. The exporter runs on this interpreter with `-P` (no current
directory on its path), so it imports the installed package, never a checkout that
happens to be the working directory.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

#: The interpreter's arguments that run the installed exporter.
EXPORTER_MODULE = ("-m", "exporter")


#: Where the kernel's own port choices start (net.ipv4.ip_local_port_range's first
#: value, 32768 by default): every bind to port 0 and every outgoing connection takes
#: its port from there on.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Below it, ports from here up are chosen at random; lower ones hold well-known
#: services (Prometheus' 9090, Grafana's 3000).
_CHOSEN_FROM = 10_000
#: Ports this process chose lately and may not have bound yet (a stack chooses
#: Prometheus' and Alertmanager's before starting either): not chosen again.
_CHOSEN_LATELY: collections.deque[int] = collections.deque(maxlen=64)


def free_port() -> int:
    """A loopback port that was free a moment ago, chosen at random below the kernel's
    ephemeral range where there is room: a port the kernel handed out is the one it
    hands the next outgoing connection of any process, and a test suite's own clients
    took one between this choice and the bind (CI saw it once in 1,822 tests)."""
    try:
        first_ephemeral = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = _CHOSEN_FROM
    if first_ephemeral - _CHOSEN_FROM >= 1_000:
        for _ in range(64):
            port = random.randrange(_CHOSEN_FROM, first_ephemeral)
            if port in _CHOSEN_LATELY:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _CHOSEN_LATELY.append(port)
            return port
    # No room below the range, or nothing free there: the kernel chooses.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A child process in its own session; its output goes to `log_path` (or nowhere)."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path | None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        argv = list(argv)
        # setpriv (util-linux, in every Debian) asks the kernel to SIGTERM the
        # process when the thread that started it dies (prctl PR_SET_PDEATHSIG):
        # a test run or demo killed outright leaves nothing behind either.
        setpriv = shutil.which("setpriv")
        if setpriv:
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        with contextlib.ExitStack() as files:
            out = (files.enter_context(open(log_path, "w")) if log_path is not None
                   else subprocess.DEVNULL)
            self.popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                          start_new_session=True)

    def log(self) -> str:
        if self.log_path is None:
            return "(no log kept)"
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to its group, then SIGKILL if it is still there 10 s later."""
        if self.popen.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.popen.wait(5)

    def signal_group(self, signum: signal.Signals) -> None:
        """`signum` to its process group, the children it started included."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def stop_together(processes: Sequence[Process], deadline_seconds: float) -> None:
    """SIGTERM to every group at once, then SIGKILL to those still there after
    `deadline_seconds`; the event loop runs meanwhile. A stop one after the other,
    each waited for on the loop's thread, adds their stops up and starves whatever
    they wait on in this process (the simulated engine a tap streams from)."""
    running = [p for p in processes if p.popen.poll() is None]
    for process in running:
        process.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + deadline_seconds
    while any(p.popen.poll() is None for p in running) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    for process in running:
        if process.popen.poll() is None:
            process.signal_group(signal.SIGKILL)
            await asyncio.to_thread(process.popen.wait, 5)


class NotReady(RuntimeError):
    """The process exited, or did not answer in time; the message holds its log."""


def wait_ready(url: str, process: Process, timeout: float = 30.0,
               context: ssl.SSLContext | None = None, unauthorised_ok: bool = False) -> bytes:
    """The first body `url` answers with (HTTP 2xx), while `process` keeps running.
    With `unauthorised_ok`, a 401 counts too: an exporter behind basic auth serves.
    A process that never answers is stopped before NotReady is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if unauthorised_ok and exc.code == 401:
                return b""
        except OSError:
            pass
        if process.popen.poll() is not None:
            raise NotReady(f"{process.name} exited with {process.popen.returncode}:\n"
                           f"{process.log()}")
        if time.monotonic() >= deadline:
            process.stop()
            raise NotReady(f"{process.name} did not answer {url} in {timeout:g} s:\n"
                           f"{process.log()}")
        time.sleep(0.05)


class ExporterProcess(Process):
    """A `rig-exporter` child and where it listens."""

    def __init__(self, args: Sequence[str], log_dir: Path | None, address: str, scheme: str,
                 python: Sequence[str], name: str,
                 open_files: tuple[int, int] | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        # An empty host listens on every interface; loopback reaches it.
        self.url = f"{scheme}://{host or '127.0.0.1'}:{port}"
        log_path = log_dir / f"{name}-{port}.log" if log_dir is not None else None
        # prlimit (util-linux) sets the limit, then runs the exporter in its place.
        limit = ([] if open_files is None
                 else ["prlimit", f"--nofile={open_files[0]}:{open_files[1]}", "--"])
        super().__init__(name, [*limit, sys.executable, "-P", *python,
                                "--web.listen-address", address, *args], log_path)

    def wait_ready(self, timeout: float = 30.0, context: ssl.SSLContext | None = None) -> None:
        wait_ready(self.url + "/-/healthy", self, timeout, context, unauthorised_ok=True)


def start_exporter(args: Sequence[str], log_dir: Path | None, *, address: str | None = None,
                   scheme: str = "http", context: ssl.SSLContext | None = None,
                   wait: bool = True, python: Sequence[str] = EXPORTER_MODULE,
                   name: str = "rig-exporter",
                   open_files: tuple[int, int] | None = None) -> ExporterProcess:
    """`rig-exporter ARGS` listening on `address` (default: a free loopback port), its
    log in `log_dir` as NAME-PORT.log. With `wait`, it returns once /-/healthy answers
    (over TLS with `context`); `python` is the interpreter's arguments that run it
    (tests pass their own to choose the event loop); `open_files` (soft, hard) starts
    it under that RLIMIT_NOFILE, as systemd's default 1024:524288 would. Use it as a
    context manager, or call `stop`."""
    exporter = ExporterProcess(args, log_dir, address or f"127.0.0.1:{free_port()}", scheme,
                               python, name, open_files)
    if wait:
        exporter.wait_ready(context=context)
    return exporter

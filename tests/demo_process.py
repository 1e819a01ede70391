"""`rigctl demo` as a person runs it: a real process in its own process group (so
that Ctrl-C, SIGINT to the group, reaches it as a terminal sends it), watched line
by line through its output."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

RIGCTL = (sys.executable, "-m", "exporter.rigctl")


@contextlib.contextmanager
def demo_running(*args: str, rigctl: Sequence[str] = RIGCTL, cwd: Path | None = None,
                 env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """`rigctl demo ARGS`, killed with its group if the test leaves it running."""
    demo = subprocess.Popen([*rigctl, "demo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            cwd=cwd, env=env)
    try:
        yield demo
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)


def read_until(process: subprocess.Popen[str], pattern: str, timeout: float) -> list[str]:
    """Lines of output up to and including the first that matches `pattern`."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if not ready:
            continue
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no {pattern!r} within {timeout} s:\n{''.join(lines)}")

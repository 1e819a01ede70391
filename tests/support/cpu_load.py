"""Keep every core busy for a test's length: the owner's rig, where SGLang's scheduler,
tokenizer and detokenizer processes keep the cores busy beside the exporter.

One spinning process per core, at the tests' own priority (no nice either way), so
the exporter, the simulated engine and the test compete with them as equals. The
spinners are children of the test and are ended by their own pids at teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def busy_cores(count: int | None = None) -> Iterator[list[int]]:
    """`count` spinning processes (default: one per core); yields their pids."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN])
                for _ in range(count or os.cpu_count() or 1)]
    try:
        yield [p.pid for p in spinners]
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(10)

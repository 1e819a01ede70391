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
from contextlib import AbstractContextManager, contextmanager, nullcontext

import pytest

SPIN = "while True: pass"
#: The two loads a timing-sensitive test runs under: the default suite runs it quiet,
#: the contention tier (`-m contention`, docs/testing.md) once more with every core busy.
QUIET, BUSY = "quiet", "busy"


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


def tier_marks(load: str) -> list[pytest.MarkDecorator]:
    """The busy load's cases belong to the contention tier, out of the default run."""
    return [pytest.mark.contention] if load == BUSY else []


def under(load: str) -> AbstractContextManager[object]:
    """Every core busy for the busy load; nothing for the quiet one."""
    return busy_cores() if load == BUSY else nullcontext()

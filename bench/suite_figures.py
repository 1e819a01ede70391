"""A pytest plugin that times each test file: its wall time and its CPU time.

    python -m pytest -p bench.suite_figures [--suite-figures FILE.json]

Each test's phases (setup, call, teardown) are timed in the process that runs them,
a pytest-xdist worker or pytest itself: wall time, and CPU time (user + system) of
that process and of the child processes it reaped in the meantime (the exporters,
Prometheus and the subprocesses the tests start and stop). The figures travel in
each report's user_properties, so they reach the controlling process from every
worker; at the end it prints the files by wall time and, with `--suite-figures`,
writes them as JSON. bench/bench_suite.py runs the whole suite with it.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

KEY = "suite_figures"


def _cpu() -> float:
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(item: pytest.Item) -> Iterator[None]:
    wall, cpu = time.monotonic(), _cpu()
    try:
        yield
    finally:
        item.user_properties.append((KEY, (time.monotonic() - wall, _cpu() - cpu,
                                           os.environ.get("PYTEST_XDIST_WORKER", "main"))))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-figures", metavar="FILE", help="write per-file figures as JSON")


class Figures:
    def __init__(self) -> None:
        self.files: dict[str, dict[str, float]] = defaultdict(
            lambda: {"wall_seconds": 0.0, "cpu_seconds": 0.0, "tests": 0})
        self.workers: dict[str, set[str]] = defaultdict(set)
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Each phase's report holds the item's properties so far: its own figure last.
        mine = [value for key, value in report.user_properties if key == KEY]
        if not mine:
            return
        wall, cpu, worker = mine[-1]
        name = report.nodeid.split("::")[0]
        row = self.files[name]
        row["wall_seconds"] += wall
        row["cpu_seconds"] += cpu
        row["tests"] += report.when == "call"
        self.workers[name].add(worker)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter,
                                config: pytest.Config) -> None:
        rows = sorted(self.files.items(), key=lambda kv: -kv[1]["wall_seconds"])
        wall = sum(r["wall_seconds"] for _, r in rows)
        cpu = sum(r["cpu_seconds"] for _, r in rows)
        tr = terminalreporter
        tr.write_sep("-", "suite figures: per file, summed over its tests")
        tr.write_line(f"{'wall s':>8} {'cpu s':>8} {'tests':>6}  file")
        for name, r in rows:
            tr.write_line(f"{r['wall_seconds']:8.1f} {r['cpu_seconds']:8.1f} "
                          f"{int(r['tests']):6d}  {name}")
        tr.write_line(f"{wall:8.1f} {cpu:8.1f} {'':6}  all files (tests' own time, summed); "
                      f"session {time.monotonic() - self.started:.1f} s wall; "
                      f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        path = config.getoption("--suite-figures")
        if path:
            Path(path).write_text(json.dumps(
                {"files": self.files, "workers": {k: sorted(v) for k, v in self.workers.items()},
                 "session_wall_seconds": time.monotonic() - self.started}, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    # Only the controlling process (or a serial run) reports.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Figures(), "suite_figures_report")

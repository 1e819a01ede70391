"""Shared fixtures: the committed two-card sysfs tree, copied so a test may break it.

And the end-to-end timing table after the run, gathered from the tests' reports so
that it comes through pytest-xdist's workers too: this conftest is the one that the
controlling process loads without collecting."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import report as e2e_report
from tests.support.cpu_load import BUSY, QUIET, tier_marks, under
from tests.support.sysfs_tree import SYSFS_FIXTURE


@pytest.fixture
def sysfs_root(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(SYSFS_FIXTURE, root, symlinks=True)
    return root


LOADS = [pytest.param(load, marks=tier_marks(load)) for load in (QUIET, BUSY)]


@pytest.fixture(params=LOADS)
def cpu_load(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test runs quiet, and in the contention tier with every core busy."""
    with under(request.param):
        yield request.param


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The suite runs on pytest-xdist workers with `--dist loadgroup` (pyproject.toml).
    A test that uses a module-scoped fixture of the suite's own (an end-to-end stack, a
    built wheel) is grouped with the rest of its file, so the file goes whole to one
    worker and its fixture starts once; every other test goes to whichever worker is
    free. The long_running files come first, longest first (a stable sort)."""
    for item in items:
        if _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items.sort(key=_expected_seconds, reverse=True)


def _shares_a_fixture(item: pytest.Item) -> bool:
    """A fixture of the suite's (not pytest's own, whose baseid is empty) that lives
    longer than one test."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(
        d.scope != "function" and d.baseid
        for defs in info.name2fixturedefs.values() for d in defs)


def _expected_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("long_running")
    return 0.0 if marker is None else marker.args[0]


E2E_ROWS: list[e2e_report.Row] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        E2E_ROWS.extend(e2e_report.rows_of(report))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if E2E_ROWS:
        terminalreporter.write_sep("-", "end-to-end: time from fault to notification")
        for line in e2e_report.table(E2E_ROWS):
            terminalreporter.write_line(line)

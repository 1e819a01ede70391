"""Shared fixtures: the committed two-card sysfs tree, copied so a test may break it.

And the end-to-end timing table after the run, gathered from the tests' reports so
that it comes through pytest-xdist's workers too: this conftest is the one that the
controlling process loads without collecting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e import report as e2e_report

FIXTURES = Path(__file__).parent / "fixtures"
SYSFS_FIXTURE = FIXTURES / "sys"


@pytest.fixture
def sysfs_root(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(SYSFS_FIXTURE, root, symlinks=True)
    return root


def card_device(root: Path, card: str) -> Path:
    """The PCI device directory behind class/drm/<card>/device, inside `root`."""
    return (root / "class" / "drm" / card / "device").resolve()


def hwmon_dir(root: Path, card: str) -> Path:
    return next((card_device(root, card) / "hwmon").iterdir())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The suite runs on pytest-xdist workers with `--dist loadfile` (pyproject.toml):
    each file goes whole to one worker, so its module fixtures start once. The
    long_running files come first, longest first (a stable sort): each starts at once
    on a worker of its own and the short files fill the other workers around them.
    (`--dist loadgroup` with a group per file, to spread some files test by test,
    did not group them: pytest-xdist 3.8 ran one file's tests on every worker.)"""
    items.sort(key=_expected_seconds, reverse=True)


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

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
    """The long_running modules first, the rest in their order (a stable sort):
    pytest-xdist hands out whole files in this order, so each long one starts at
    once on a worker of its own and the short files share the other workers."""
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)


E2E_ROWS: list[e2e_report.Row] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        E2E_ROWS.extend(e2e_report.rows_of(report))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if E2E_ROWS:
        terminalreporter.write_sep("-", "end-to-end: time from fault to notification")
        for line in e2e_report.table(E2E_ROWS):
            terminalreporter.write_line(line)

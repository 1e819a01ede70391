"""Print the end-to-end timing table after the run (pytest's terminal summary)."""

from __future__ import annotations

import pytest

from tests.e2e import report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if report.ROWS:
        terminalreporter.write_sep("-", "end-to-end: time from fault to notification")
        for line in report.table():
            terminalreporter.write_line(line)

"""What every rigctl subcommand shares: Nagios-style exit codes and the parser."""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse exits 2, which a Nagios-style caller would read as "critical".
        self.print_usage(sys.stderr)
        self.exit(EXIT_UNKNOWN, f"{self.prog}: error: {message}\n")

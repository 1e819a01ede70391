"""What every rigctl subcommand shares: exit codes, the parser, a small JSON
HTTP client, and the terminal's colours."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO
from urllib.parse import urlsplit

from exporter.config import DEFAULT_LISTEN_ADDRESS

# Nagios plugin exit codes: a monitoring system can run rigctl as a check.
EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3
DEFAULT_EXPORTER = f"http://{DEFAULT_LISTEN_ADDRESS}"

EXIT_CODES = """exit status (as a Nagios plugin):
  0  ok            1  warning
  2  critical      3  unknown: bad arguments, the exporter cannot be reached,
                      or it could judge nothing yet"""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse exits 2, which a Nagios-style caller would read as "critical".
        self.print_usage(sys.stderr)
        self.exit(EXIT_UNKNOWN, f"{self.prog}: error: {message}\n")


def http_url(text: str) -> str:
    """An argparse type: an http(s) URL, without a trailing slash."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"expected an http(s) URL such as http://127.0.0.1:30000, got {text!r}")
    return text.rstrip("/")


def positive(kind: type[int] | type[float]):
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


class Unreachable(Exception):
    """A server did not answer usefully; str() names the URL and the reason."""


def get_json(url: str, timeout: float) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise Unreachable(f"{url}: {exc.reason}") from exc
    except (OSError, TimeoutError) as exc:
        raise Unreachable(f"{url}: {exc}") from exc
    except ValueError as exc:
        raise Unreachable(f"{url}: not JSON: {exc}") from exc


# ANSI colours, only when writing to a terminal.
COLOURS = {"crit": "\033[1;31m", "warn": "\033[33m", "unknown": "\033[2m", "ok": "\033[32m"}
RESET = "\033[0m"


def is_tty(out: TextIO) -> bool:
    return hasattr(out, "isatty") and out.isatty()


def coloured(text: str, status: str, colour: bool) -> str:
    return f"{COLOURS.get(status, '')}{text}{RESET}" if colour and status in COLOURS else text


def help_formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)

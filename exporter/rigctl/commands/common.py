"""What every rigctl subcommand shares: exit codes, the parser, the access flags
(exporter.rigctl.client reads the answers), and the terminal's colours."""

from __future__ import annotations

import argparse
import os
import ssl
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from exporter.config import DEFAULT_LISTEN_ADDRESS
from exporter.process.endings import CLOSED_PIPE_HELP, INTERRUPTED_HELP, OneLineErrors
from exporter.rigctl.client.http import Access, Unreachable

# Nagios plugin exit codes: a monitoring system can run rigctl as a check.
EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3
DEFAULT_EXPORTER = f"http://{DEFAULT_LISTEN_ADDRESS}"

# The end of every subcommand's exit status table: Ctrl-C and a closed pipe.
EXIT_ENDINGS = f"  {INTERRUPTED_HELP}\n  {CLOSED_PIPE_HELP}"
EXIT_CODES = f"""exit status (as a Nagios plugin):
  0  ok            1  warning
  2  critical      3  unknown: bad arguments, the exporter cannot be reached,
                      or it could judge nothing yet
{EXIT_ENDINGS}"""


class Parser(OneLineErrors):
    # argparse exits 2, which a Nagios-style caller would read as "critical".
    usage_status = EXIT_UNKNOWN


def http_url(text: str) -> str:
    """An argparse type: an http(s) URL, without a trailing slash."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"expected an http(s) URL such as http://127.0.0.1:30000, got {text!r}")
    return text.rstrip("/")


def add_exporter_argument(parser: argparse.ArgumentParser) -> None:
    """--exporter, for the subcommands that read a rig exporter."""
    parser.add_argument("--exporter", type=http_url, default=DEFAULT_EXPORTER, metavar="URL",
                        help=f"the rig exporter (default {DEFAULT_EXPORTER})")


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




def add_access_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", metavar="USER",
                        help="basic-auth user of an exporter behind --web.config.file")
    parser.add_argument("--password-file", metavar="FILE",
                        help="the user's password, first line of FILE (default: "
                             "$RIGCTL_PASSWORD)")
    parser.add_argument("--ca-file", metavar="FILE",
                        help="CA certificate that signed the exporter's TLS certificate")


def access_from_args(args: argparse.Namespace) -> Access:
    """The Access the flags ask for; Unreachable when a file cannot be read."""
    password = os.environ.get("RIGCTL_PASSWORD", "")
    if args.password_file:
        try:
            password = Path(args.password_file).read_text().splitlines()[0]
        except (OSError, IndexError) as exc:
            raise Unreachable(f"--password-file {args.password_file}: cannot read a "
                              f"password ({exc})") from exc
    if args.ca_file:
        try:
            ssl.create_default_context(cafile=args.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise Unreachable(f"--ca-file {args.ca_file}: {exc}") from exc
    return Access(args.user, password, args.ca_file)


# ANSI colours, only when writing to a terminal.
COLOURS = {"crit": "\033[1;31m", "warn": "\033[33m", "unknown": "\033[2m", "ok": "\033[32m"}
RESET = "\033[0m"


def is_tty(out: TextIO) -> bool:
    return hasattr(out, "isatty") and out.isatty()


def coloured(text: str, status: str, colour: bool) -> str:
    return f"{COLOURS.get(status, '')}{text}{RESET}" if colour and status in COLOURS else text


def help_formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)

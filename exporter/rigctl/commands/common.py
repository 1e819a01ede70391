"""What every rigctl subcommand shares: exit codes, the parser, the access flags
(exporter.rigctl.client reads the answers), and the terminal's colours."""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import replace
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from exporter.config import DEFAULT_LISTEN_ADDRESS, Config
from exporter.process.endings import CLOSED_PIPE_HELP, INTERRUPTED_HELP, OneLineErrors
from exporter.rigctl.client.http import Access, Unreachable, url_of
from exporter.rigctl.experiments.engine import ENGINE_KINDS

# Nagios plugin exit codes: a monitoring system can run rigctl as a check.
EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3
#: The exit code of each status the exporter's health checks and the report's verdict
#: use (an unknown word is unknown).
EXIT_FOR_STATUS = {"ok": EXIT_OK, "warn": EXIT_WARNING, "crit": EXIT_CRITICAL,
                   "unknown": EXIT_UNKNOWN}
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


def add_exporter_argument(parser: argparse.ArgumentParser, from_config: bool = False) -> None:
    """--exporter, for the subcommands that read a rig exporter. With `from_config`
    the default is None: the command takes the exporter from its --config.file
    (`exporter_from_config`), else DEFAULT_EXPORTER."""
    default = "the config's web.listen_address with --config.file, else " if from_config \
        else ""
    parser.add_argument("--exporter", type=http_url, metavar="URL",
                        default=None if from_config else DEFAULT_EXPORTER,
                        help=f"the rig exporter (default {default}{DEFAULT_EXPORTER})")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine and --kind, for the subcommands that send generations to an engine."""
    parser.add_argument("--engine", required=True, metavar="URL", type=http_url,
                        help="the engine's base URL, e.g. http://127.0.0.1:30000")
    parser.add_argument("--kind", choices=ENGINE_KINDS,
                        help="the engine's software, where it is not to be read from what "
                             "the engine serves; it says the default route (sglang: /generate, the "
                             "others: /v1/completions); openai: any OpenAI-compatible "
                             "server, with no facts but the flags")


def add_alerting_arguments(parser: argparse.ArgumentParser, prometheus: str,
                           alertmanager: str) -> None:
    """--prometheus and --alertmanager, each with what the subcommand asks it."""
    parser.add_argument("--prometheus", type=http_url, metavar="URL", help=prometheus)
    parser.add_argument("--alertmanager", type=http_url, metavar="URL", help=alertmanager)


def add_timeout_argument(parser: argparse.ArgumentParser, default: float,
                         each: str = "server") -> None:
    parser.add_argument("--timeout", type=positive(float), default=default, metavar="SECONDS",
                        help=f"how long to wait for each {each} (default {default:g})")


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
    if args.user is not None and ":" in args.user:
        raise Unreachable(f"--user {args.user}: a basic-auth user cannot hold ':' (RFC 7617)")
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


def exporter_from_config(args: argparse.Namespace, config: Config | None) -> tuple[str, Access]:
    """The exporter and how to reach it: --exporter and the access flags as given;
    without --exporter, the exporter `config` describes (its web.listen_address, on
    loopback when it listens on every address; https with its own certificate
    trusted, unless --ca-file, when its web config has TLS; its user, unless --user,
    when it has exactly one). The password is never in a config: --password-file or
    $RIGCTL_PASSWORD. ConfigError names a web config that cannot be read."""
    access = access_from_args(args)
    if args.exporter is not None or config is None:
        return args.exporter or DEFAULT_EXPORTER, access
    if config.web.config_file is None:
        return url_of(config.web.listen_address), access
    # Here, not above: PyYAML is only for this, and `rigctl health` starts without it.
    from exporter.daemon.web.security import read_web_config

    web = read_web_config(config.web.config_file)
    tls, users = web.get("tls_server_config"), web.get("basic_auth_users")
    cert = tls.get("cert_file") if isinstance(tls, dict) else None
    if access.ca_file is None and isinstance(cert, str):
        # Relative to the web config file, as the exporter reads it.
        access = replace(access, ca_file=str(Path(config.web.config_file).parent / cert))
    if access.user is None and isinstance(users, dict) and len(users) == 1 \
            and ":" not in str(next(iter(users))):
        access = replace(access, user=str(next(iter(users))))
    return url_of(config.web.listen_address, "https" if tls else "http"), access


# ANSI colours, only when writing to a terminal.
COLOURS = {"crit": "\033[1;31m", "warn": "\033[33m", "unknown": "\033[2m", "ok": "\033[32m"}
RESET = "\033[0m"


def is_tty(out: TextIO) -> bool:
    return hasattr(out, "isatty") and out.isatty()


def coloured(text: str, status: str, colour: bool) -> str:
    return f"{COLOURS.get(status, '')}{text}{RESET}" if colour and status in COLOURS else text


def help_formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)

"""`rig-exporter`: Prometheus-style flags over the TOML config, then serve.

Precedence: built-in defaults < `--config.file` < flags. A bad value prints one
line naming the key and exits 2, never a traceback; how it ends otherwise is in
EXIT_CODES (`exporter.process.endings`).
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from exporter import __version__
from exporter.config import (
    HIDDEN,
    TABLE_CLASSES,
    TAP_DEFAULT_HOST,
    Config,
    ConfigError,
    default_of,
    field_words,
    load_config,
    read_config_file,
)
from exporter.process import log_limits
from exporter.process.endings import EXIT_INTERRUPTED, OneLineErrors, run_guarded

log = logging.getLogger("exporter")


@dataclass(frozen=True)
class Flag:
    """A flag that overrides one key of the TOML file, derived from the key's field
    (exporter/config.py): its name, type and words. `help` says "{default}" where the
    key's built-in value goes, or ends with it (a key unset by default: not)."""

    flag: str
    section: str
    key: str
    help: str
    type: type = str

    def help_text(self) -> str:
        value = default_of(self.section, self.key)
        if value is None:
            return self.help
        if "{default}" in self.help:
            return self.help.format(default=shown(value))
        return f"{self.help} (default {shown(value)})"

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        dest = f"{self.section}.{self.key}"
        if self.type is bool:
            parser.add_argument(self.flag, dest=dest, action=argparse.BooleanOptionalAction,
                                help=self.help_text())
        else:
            parser.add_argument(self.flag, dest=dest, type=self.type, help=self.help_text())


def key_flags() -> tuple[Flag, ...]:
    """One flag per key of the single tables: `--table.key` with `_` as `-` and
    without `_seconds`, unless the key's Doc names another (or None: no flag)."""
    flags = []
    for section, table in TABLE_CLASSES.items():
        if section == "engine":  # a list of tables: --engine, --tap.listen-address
            continue
        for field in msgspec.inspect.type_info(table).fields:
            words = field_words(field)
            name = words.extra.get(
                "flag", f"--{section}.{field.name.removesuffix('_seconds').replace('_', '-')}")
            if name is not None:
                flags.append(Flag(name, section, field.name, words.help, words.type))
    return tuple(flags)


FLAGS = key_flags()
EXIT_CANNOT_LISTEN, EXIT_BAD_CONFIG = 1, 2
EXIT_CODES = f"""exit status:
  0  stopped by SIGTERM or Ctrl-C once serving
  {EXIT_CANNOT_LISTEN}  cannot listen on --web.listen-address
  {EXIT_BAD_CONFIG}  a bad flag, config file or config value (one line names it)
  {EXIT_INTERRUPTED}  Ctrl-C before it was serving, after one line on stderr"""


def shown(value: object) -> str:
    """A default as --help writes it: 8.0 as 8, True as on."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="rig-exporter",
        description="Prometheus exporter for an LLM inference rig (engines, AMD GPUs, host).",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config.file", dest="config_file", metavar="PATH",
                        help="TOML config file (see docs/configuration.md)")
    for flag in FLAGS:
        flag.add_to(parser)
    parser.add_argument(
        "--engine", action="append", metavar="NAME=URL[,key=value...]",
        help="an engine to scrape, e.g. main=http://127.0.0.1:30000,kind=sglang,"
             "probe_interval_seconds=60; repeatable; replaces the file's [[engine]] list",
    )
    add_tap_flag(parser)
    add_agent_flag(parser)
    parser.add_argument("--version", action="version", version=f"rig-exporter {__version__}")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    raw: dict[str, Any] = read_config_file(args.config_file) if args.config_file else {}
    raw = copy.deepcopy(raw)
    for dest, value in vars(args).items():
        if value is None or "." not in dest:
            continue
        section, key = dest.split(".", 1)
        table = raw.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(section, table, "must be a table")
        table[key] = value
    if args.engine:
        raw["engine"] = [parse_engine_flag(spec) for spec in args.engine]
    apply_tap_flags(raw, args.tap_listen_address or ())
    apply_agent_flags(raw, args.agent or ())
    return load_config(raw)


def add_tap_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tap.listen-address", dest="tap_listen_address", action="append",
        metavar="NAME=HOST:PORT",
        help="put the stream tap in front of engine NAME, listening on HOST:PORT (a bare "
             f"PORT means {TAP_DEFAULT_HOST}); sets that engine's tap_listen_address; "
             "repeatable")


def apply_tap_flags(raw: dict[str, Any], specs: Sequence[str]) -> None:
    """`main=127.0.0.1:30001` sets tap_listen_address on the [[engine]] named main."""
    for spec in specs:
        name, sep, address = spec.partition("=")
        if not sep:
            raise ConfigError("--tap.listen-address", spec, "expected NAME=HOST:PORT")
        engines = raw.get("engine", [])
        table = next((e for e in engines if isinstance(e, dict) and e.get("name") == name),
                     None)
        if table is None:
            raise ConfigError("--tap.listen-address", spec, f"no engine named {name!r}")
        table["tap_listen_address"] = address


def add_agent_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine.agent", dest="agent", action="append",
        metavar="ENGINE=NAME,MATCHER=VALUE",
        help="an agent of engine ENGINE that the stream tap names its requests after; "
             "MATCHER is api_key_file=PATH (a bearer token, read from the file), "
             "header='X-Agent: NAME', user=USER (the body's OpenAI user field) or "
             "address=IP[/PREFIX]; appended to that engine's [[engine.agent]] list; "
             "repeatable, first match wins")


def apply_agent_flags(raw: dict[str, Any], specs: Sequence[str]) -> None:
    """`main=analyst,api_key_file=/etc/rig/analyst.key` adds an [[engine.agent]] to
    the engine named main. A token itself is refused here: a command line is
    readable by every user of the host (ps), a file need not be. A spec is never
    echoed: it may hold one all the same."""
    for spec in specs:
        engine_and_name, sep, matcher = spec.partition(",")
        engine, has_name, name = engine_and_name.partition("=")
        key, has_value, value = matcher.partition("=")
        if not (sep and has_name and has_value):
            raise ConfigError("--engine.agent", HIDDEN, "expected ENGINE=NAME,MATCHER=VALUE, "
                              "e.g. main=analyst,api_key_file=/etc/rig/analyst.key")
        if key == "api_key":
            raise ConfigError("--engine.agent", HIDDEN, "a token is not taken on the command "
                              "line (any user can read it there): use api_key_file=PATH")
        engines = raw.get("engine", [])
        table = next((e for e in engines if isinstance(e, dict) and e.get("name") == engine),
                     None)
        if table is None:
            raise ConfigError("--engine.agent", HIDDEN, f"no engine named {engine!r}")
        agents = table.setdefault("agent", [])
        if not isinstance(agents, list):
            raise ConfigError(f"engine {engine!r} agent", HIDDEN,
                              "must be an array of tables ([[engine.agent]])")
        agents.append({"name": name, key: value})


def parse_engine_flag(spec: str) -> dict[str, Any]:
    """`main=http://h:30000,kind=vllm,probe_interval_seconds=60` -> an [[engine]] table."""
    first, *rest = spec.split(",")
    name, sep, url = first.partition("=")
    if not sep:
        raise ConfigError("--engine", spec, "expected NAME=URL[,key=value...]")
    table: dict[str, Any] = {"name": name, "url": url}
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--engine", spec, f"expected key=value, got {item!r}")
        table[key] = _scalar(value)
    return table


def _scalar(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded("rig-exporter", lambda out: run(args))


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"rig-exporter: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    log_limits.install(config.log_level, config.log_repeat_interval_seconds)
    from exporter.daemon.lifecycle import serve  # aiohttp is only needed once the config is good
    from exporter.daemon.web.security import load_web_security

    try:
        security = load_web_security(config.web.config_file)
    except ConfigError as exc:
        print(f"rig-exporter: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    try:
        serve(config, security, reload=lambda: config_from_args(args))
    except OSError as exc:
        print(f"rig-exporter: cannot listen on {config.web.listen_address}: {exc}",
              file=sys.stderr)
        return EXIT_CANNOT_LISTEN
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""rigctl: the rig from a terminal.

commands:
  demo     the whole stack on a simulated rig: scenarios, alerts, notifications
  health   is the rig healthy? one line per check, worst first (reads the exporter)
  report   what happened over a range, from Prometheus: incidents, agents, cards, verdict
  doctor   does the rig hold the exporter's assumptions? readers, signals, Prometheus, Grafana
  probe    send one streaming request to an engine now and time every token gap
  bench    the starvation and concurrency experiments, for A/B tests of scheduler flags
  sim      run the simulated rig (SGLang, two 7900 XTX cards, host) and play scenarios

examples:
  rigctl demo
  rigctl health
  rigctl health --prometheus http://127.0.0.1:9090 --watch 5
  rigctl report --prometheus http://127.0.0.1:9090 --since 8h --check
  rigctl doctor --config.file /etc/rig-exporter/rig.toml --prometheus http://127.0.0.1:9090
  rigctl probe --engine http://127.0.0.1:30000
  rigctl bench starvation --engine http://127.0.0.1:30000 --label default --out ab.jsonl
  rigctl sim --scenario thermal-downclock --time-scale 0.05

`rigctl COMMAND --help` says more about each. One module per subcommand; each
has `add_parser(commands)` and `run(args, out)`. How a command ends (Ctrl-C, a
closed pipe, a bad flag) is `exporter.process.endings`'s, for all of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TextIO

from exporter import __version__
from exporter.process.endings import Interrupted, run_guarded

COMMANDS = ("demo", "health", "report", "doctor", "probe", "bench", "sim")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser, or only `command`'s: `rigctl health` then leaves
    the simulator, the demo's stack and the experiments unloaded."""
    # Imported here, not above: importing the package (the simulator with it) takes a
    # second or more, and a Ctrl-C meanwhile must meet the guard.
    from exporter.rigctl.commands.common import EXIT_CODES, Parser, help_formatter

    intro, commands_text = __doc__.split("\n\n")[0], __doc__.split("\n\n")[1:3]
    parser = Parser(prog="rigctl", description=intro,
                    epilog="\n\n".join([*commands_text, EXIT_CODES]),
                    formatter_class=help_formatter)
    parser.add_argument("--version", action="version", version=f"rigctl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)
    for name in (command,) if command in COMMANDS else COMMANDS:
        module = importlib.import_module(f"exporter.rigctl.commands.{name}")
        module.add_parser(commands).set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    return run_guarded("rigctl", lambda out: _run(argv, out), out)


def _run(argv: Sequence[str] | None, out: TextIO) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return args.run(args, out)
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(f"rigctl {args.command}: interrupted") from None

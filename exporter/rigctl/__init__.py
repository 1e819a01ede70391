"""`rigctl`: the rig from a terminal.

    rigctl demo
    rigctl probe --engine http://127.0.0.1:30000

One module per subcommand; each has `add_parser(commands)` and `run(args, out)`.
Exit status as a Nagios plugin: 0 ok, 1 warning, 2 critical, 3 unknown.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from exporter.rigctl import demo, probe
from exporter.rigctl.common import Parser

SUBCOMMANDS = (probe, demo)


def build_parser() -> Parser:
    parser = Parser(prog="rigctl", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(commands).set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args, out)

"""`rigctl sim`: run the simulated rig (the same as `python -m exporter.sim`)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from exporter.process.endings import CLOSED_PIPE_HELP
from exporter.sim import __main__ as sim_main

EXIT_CODES = f"""exit status:
  0  stopped (Ctrl-C or SIGTERM), or the scenario ended with --exit-at-end
  3  bad arguments
  {CLOSED_PIPE_HELP}"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "sim", help="run the simulated rig (SGLang, two 7900 XTX cards, host) and play scenarios",
        description=sim_main.build_parser().description,
        epilog=f"{sim_main.epilog()}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return sim_main.add_arguments(parser)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    return sim_main.run(args, out)

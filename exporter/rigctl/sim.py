"""`rigctl sim`: run the simulated rig (the same as `python -m exporter.sim`).

Exit status 0 once stopped (Ctrl-C or SIGTERM), 3 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from exporter.sim import __main__ as sim_main


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "sim", help="run the simulated rig (SGLang, two 7900 XTX cards, host) and play scenarios",
        description=sim_main.build_parser().description, epilog=sim_main.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return sim_main.add_arguments(parser)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    return sim_main.run(args, out)

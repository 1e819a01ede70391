"""`python -m exporter.sim` (also `rigctl sim`): run the simulated rig.

It starts a simulated SGLang server on a free loopback port, writes an amdgpu
sysfs tree with two RX 7900 XTX cards (and the CPU's k10temp) and a proc tree,
and serves a control endpoint on loopback. Once ready it prints one line for a
person and one JSON object on a line of its own for a program:

    {"engine_url": "http://127.0.0.1:PORT", "tap_url": "http://127.0.0.1:PORT",
     "sysfs_root": "...", "proc_root": "...",
     "exporter_args": ["--engine", "main=...", ...], "control_url": "http://127.0.0.1:PORT",
     "time_scale": 1.0, "stall_scale": 1.0, "scenario": "healthy"}

Run an exporter on it with `rig-exporter <exporter_args>`: they put the stream tap
on `tap_url` and name the rig's agents (exporter/sim/agents.py), which talk to it.
With --scenario it then plays that scenario, printing each step as `[  60.0 s] fault: ...`, and
holds the last state until stopped (or exits with --exit-at-end). Ctrl-C or
SIGTERM stops it and removes every file it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from exporter.process.endings import Say, run_guarded
from exporter.sim.control import RigControl
from exporter.sim.control import __doc__ as CONTROL_DOC
from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios import SCENARIOS


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--list", action="store_true",
                        help="list the scenarios with their summaries, then exit")
    parser.add_argument("--scenario", metavar="NAME", choices=sorted(SCENARIOS),
                        help="play this scenario once ready (default: stay healthy)")
    parser.add_argument("--time-scale", type=_positive, default=1.0, metavar="F",
                        help="the rig lives F times faster than real time, e.g. 20 plays "
                             "a 47 s stall in 2.35 s (default 1); the exporter flags "
                             "printed compress the probe and stall tracker the same way")
    parser.add_argument("--stall-scale", type=_positive, default=None, metavar="S",
                        help="compress decode stalls and the probe's deadline S-fold "
                             "only (default F): on a busy machine keep S at 2 or so, or "
                             "scheduling hiccups read as stalls")
    parser.add_argument("--dir", metavar="PATH",
                        help="write sys/ and proc/ under PATH (default: a new temporary "
                             "directory); both are removed on exit")
    parser.add_argument("--control-port", type=int, default=0, metavar="PORT",
                        help="port of the loopback control endpoint (default: a free one)")
    parser.add_argument("--engine-kind", choices=("sglang", "llamacpp"), default="sglang",
                        help="the engine the rig runs: the simulated SGLang, or a simulated "
                             "llama.cpp llama-server on the same scheduler model (default "
                             "%(default)s)")
    parser.add_argument("--exit-at-end", action="store_true",
                        help="exit when the scenario ends instead of holding its last state")
    return parser


def build_parser(prog: str = "python -m exporter.sim") -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(
        prog=prog, description="Run the simulated rig: SGLang, two RX 7900 XTX cards, the host.",
        epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter))


def epilog() -> str:
    names = "\n".join(f"  {name:24} {s.summary}" for name, s in SCENARIOS.items())
    body = (__doc__ or "").split("\n\n", 1)[1]
    return f"{body}\nscenarios:\n{names}\n\ncontrol endpoint:\n{CONTROL_DOC}"


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def list_scenarios(out: TextIO) -> None:
    for name, scenario in SCENARIOS.items():
        print(f"{name:24} {scenario.summary}", file=out)


async def run_rig(args: argparse.Namespace, out: TextIO) -> int:
    stop = asyncio.Event()
    say = Say(out, on_closed=stop.set)  # a reader gone (| head -1) stops the rig too
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    rig = SimRig(time_scale=args.time_scale, directory=args.dir, say=say,
                 stall_scale=args.stall_scale, engine_kind=args.engine_kind)
    control = RigControl(rig)
    try:
        await rig.start()
        await control.start(args.control_port)
        ready = {**rig.describe(), "control_url": control.url, "scenario": args.scenario or ""}
        say(f"simulated rig ready: engine {rig.engine_url}, control {control.url}, "
            f"files in {rig.directory}; run: rig-exporter {' '.join(rig.exporter_args())}")
        say(json.dumps(ready))
        if args.scenario:
            control.start_playing(args.scenario)
        waits = [asyncio.create_task(stop.wait())]
        if args.scenario and args.exit_at_end and control.playing is not None:
            waits.append(control.playing)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        say("stopping the simulated rig")
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await control.stop()
        await rig.stop()
    say.raise_if_closed()
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_guarded(parser.prog, lambda out: run(args, out), out)


def run(args: argparse.Namespace, out: TextIO) -> int:
    if args.list:
        list_scenarios(out)
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run_rig(args, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`rigctl doctor`: does the rig hold what the exporter assumes of it?

It watches the exporter for a few seconds and checks, one concern at a time
(exporter/rigctl/doctor/): the engine's version and stall plan, decode progress while
requests run, metrics_dir, traffic around the tap, the cards and their readers,
the energy counter's unit, the host's PSI and swap, and with --prometheus and
--grafana what they were given. Each check says what it looked at and, when it
is not ok, the one thing to change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from exporter.config import ConfigError, load_config, read_config_file
from exporter.rigctl.client.http import Unreachable
from exporter.rigctl.commands.common import (
    EXIT_ENDINGS,
    EXIT_UNKNOWN,
    add_access_arguments,
    add_alerting_arguments,
    add_exporter_argument,
    add_timeout_argument,
    coloured,
    exporter_from_config,
    help_formatter,
    http_url,
    is_tty,
    positive,
)
from exporter.rigctl.doctor.examine import MIN_WATCH_SECONDS, Request, examine
from exporter.rigctl.doctor.grafana import TokenAccess
from exporter.rigctl.doctor.report import DoctorStatus, Verdict

# The terminal colours rigctl health uses, by the doctor's statuses.
COLOUR_OF = {DoctorStatus.FAIL: "crit", DoctorStatus.WARN: "warn", DoctorStatus.SKIP: "unknown",
             DoctorStatus.OK: "ok"}

EXAMPLES = f"""examples:
  rigctl doctor --config.file /etc/rig-exporter/rig.toml
  rigctl doctor --config.file rig.toml --prometheus http://127.0.0.1:9090 \\
      --grafana http://127.0.0.1:3000 --grafana-token-file ~/.grafana-token
  rigctl doctor --exporter http://rig:9842 --json

It reads the exporter's /metrics three times over the watch (each as one
Prometheus scrape costs the engine: a /metrics render at most) and, with
metrics_dir, the engine's /metrics once more. It never generates, unless
--probe: then one short stream per engine, through its tap if it has one.
Run it on the rig host with --config.file: the checks of files (gpu_metrics,
pp_dpm_*, metrics_dir) read them with the exporter's readers, and the rules
are compared with that file's [thresholds].

exit status:
  0  every check ok (skips allowed)      1  warnings, no failure
  2  a check failed                      3  the exporter cannot be reached,
                                            or a bad argument
{EXIT_ENDINGS}"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    doctor = commands.add_parser(
        "doctor", help="does the rig hold the exporter's assumptions? one check per concern",
        description=__doc__.split("\n\n")[1], epilog=EXAMPLES, formatter_class=help_formatter)
    add_exporter_argument(doctor, from_config=True)
    doctor.add_argument("--config.file", dest="config_file", metavar="PATH",
                        help="the exporter's config (rig.toml): its engines, sysfs_root, "
                             "metrics_dir and [thresholds]")
    add_alerting_arguments(doctor, "also check the Prometheus that scrapes the exporter",
                           "the Alertmanager Prometheus should send to")
    doctor.add_argument("--grafana", type=http_url, metavar="URL",
                        help="also check Grafana's dashboards and data source")
    doctor.add_argument("--grafana-token-file", metavar="FILE",
                        help="a Grafana service account token, first line of FILE "
                             "(default: $GRAFANA_TOKEN)")
    doctor.add_argument("--probe", action="store_true",
                        help="send one short stream to each engine while watching "
                             "(needs --config.file)")
    doctor.add_argument("--watch-seconds", type=positive(float), default=6.0,
                        metavar="SECONDS",
                        help=f"how long to watch (default 6, at least {MIN_WATCH_SECONDS:g})")
    doctor.add_argument("--json", action="store_true", help="print the verdict as JSON")
    add_timeout_argument(doctor, 10.0)
    add_access_arguments(doctor)
    return doctor


def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        request = _request(args)
    except (ConfigError, Unreachable, ValueError) as exc:
        print(f"rigctl doctor: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    try:
        verdict = examine(request)
    except Unreachable as exc:
        print(f"rigctl doctor: cannot reach the exporter: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.json:
        print(json.dumps(verdict.to_json(), indent=2), file=out)
    else:
        print_verdict(verdict, out, colour=is_tty(out))
    return verdict.exit_code


def _request(args: argparse.Namespace) -> Request:
    config = load_config(read_config_file(args.config_file)) if args.config_file else None
    if args.probe and config is None:
        raise ValueError("--probe needs --config.file: the engines to send to")
    if args.watch_seconds < MIN_WATCH_SECONDS:
        raise ValueError(f"--watch-seconds must be {MIN_WATCH_SECONDS:g} or more (the "
                         "energy counter is compared over 5 s)")
    token = os.environ.get("GRAFANA_TOKEN", "")
    if args.grafana_token_file:
        try:
            token = Path(args.grafana_token_file).read_text().splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise Unreachable(f"--grafana-token-file {args.grafana_token_file}: cannot read "
                              f"a token ({exc})") from exc
    exporter, access = exporter_from_config(args, config)
    return Request(
        exporter=exporter, access=access, config=config,
        config_path=args.config_file, prometheus=args.prometheus,
        alertmanager=args.alertmanager, grafana=args.grafana,
        grafana_access=TokenAccess(token=token), probe=args.probe,
        watch_seconds=args.watch_seconds, timeout=args.timeout)


def print_verdict(verdict: Verdict, out: TextIO, colour: bool) -> None:
    checks = verdict.worst_first()
    counts = {s: sum(1 for c in checks if c.status is s) for s in
              (DoctorStatus.FAIL, DoctorStatus.WARN, DoctorStatus.OK, DoctorStatus.SKIP)}
    tally = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    status = verdict.status
    print(f"rig doctor {coloured(status.value.upper(), COLOUR_OF[status], colour)}: {tally} "
          f"({verdict.exporter}, watched {verdict.watched_seconds:.1f} s)", file=out)
    header = ("STATUS", "CHECK", "ON")
    widths = [max(len(h), *(len(v) for v in column)) for h, column in
              zip(header, ([c.status.value.upper() for c in checks], [c.name for c in checks],
                           [c.subject for c in checks]), strict=True)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + "  DETAIL",
          file=out)
    indent = " " * (sum(widths) + 2 * len(widths))
    for check in checks:
        cells = [check.status.value.upper().ljust(widths[0]), check.name.ljust(widths[1]),
                 check.subject.ljust(widths[2])]
        cells[0] = coloured(cells[0], COLOUR_OF[check.status], colour)
        print("  ".join(cells) + "  " + check.detail, file=out)
        if check.fix and check.status is not DoctorStatus.OK:
            print(f"{indent}fix: {check.fix}", file=out)

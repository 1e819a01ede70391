"""`rigctl report`: what happened over a range, from Prometheus: the incidents, who
starved whom, which card ran hot, whether the cache held, and a verdict.

It reads Prometheus' HTTP API (or VictoriaMetrics', which speaks the same) and replays
every alert rule over the range itself, from the same generated rules and thresholds,
so that it works on history no rule evaluated (docs/report.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TextIO

from exporter.rigctl.client.http import BadAnswer, Unreachable
from exporter.rigctl.commands.common import (
    EXIT_CODES,
    EXIT_FOR_STATUS,
    EXIT_OK,
    EXIT_UNKNOWN,
    access_from_args,
    add_access_arguments,
    add_timeout_argument,
    coloured,
    help_formatter,
    http_url,
    is_tty,
)
from exporter.rigctl.report.rules import matchers, parse_duration
from exporter.thresholds import Thresholds

#: deploy/prometheus.yml's evaluation_interval: the step the rules are replayed at
#: (tests/rigctl/report/test_rules.py holds the two equal).
DEFAULT_EVAL_SECONDS = 5.0
#: The longest range: 31 days at the 5 s step is 535,680 evaluation points a rule.
MAX_RANGE_SECONDS = 31 * 86400
#: An --end this far past the clock is a mistake, not the clock's drift.
FUTURE_SLACK_SECONDS = 60.0

EXAMPLES = f"""examples:
  rigctl report --prometheus http://127.0.0.1:9090 --since 8h
  rigctl report --prometheus http://127.0.0.1:9090 --start 2026-12-06T22:00:00Z \\
      --end 2026-12-07T06:00:00Z --json
  rigctl report --prometheus http://vm:8428 --rig den --since 7d --html night.html --check

TIME is RFC 3339 (2026-12-07T06:00:00Z) or Unix seconds; DURATION is 8h, 90m, 7d.
Without --end the range ends now. Every alert rule is replayed over the range at the
rules' evaluation step (--eval-interval); the range is cut into at most 720 buckets,
whose length the report states, so a 7-day report costs the queries of an 8-hour one.

{EXIT_CODES.replace("the exporter cannot be reached", "Prometheus cannot be reached")}
  without --check: 0 once the report is printed, 3 when it could not be made"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    report = commands.add_parser(
        "report", help="what happened over a range, from Prometheus: incidents, agents, verdict",
        description=__doc__.split("\n\n")[0], epilog=EXAMPLES, formatter_class=help_formatter)
    report.add_argument("--prometheus", type=http_url, metavar="URL", required=True,
                        help="the Prometheus (or VictoriaMetrics) that holds the rig's series")
    when = report.add_mutually_exclusive_group(required=True)
    when.add_argument("--since", type=_duration, metavar="DURATION",
                      help="the range is the last DURATION before --end")
    when.add_argument("--start", type=_time, metavar="TIME", help="the range's start")
    report.add_argument("--end", type=_time, metavar="TIME", help="the range's end (default now)")
    report.add_argument("--json", action="store_true",
                        help="print the report as JSON (exporter/rigctl/report/report.schema.json)")
    report.add_argument("--html", type=Path, metavar="FILE",
                        help="also write a self-contained HTML page with a timeline to FILE")
    report.add_argument("--check", action="store_true",
                        help="exit with the verdict: 0 ok, 1 warn, 2 crit, 3 unknown")
    for label in ("rig", "job", "instance"):
        report.add_argument(f"--{label}", metavar="VALUE",
                            help=f"only the series whose {label} label is VALUE")
    report.add_argument("--eval-interval", type=_duration, default=DEFAULT_EVAL_SECONDS,
                        metavar="DURATION",
                        help=f"the rules' evaluation step (default {DEFAULT_EVAL_SECONDS:g}s, "
                             "deploy/prometheus.yml's)")
    add_timeout_argument(report, 60.0, each="query")
    add_access_arguments(report)
    return report


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 8h or 90m, got {text!r}")\
            from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return seconds


def _time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RFC 3339 (2026-12-07T06:00:00Z) or Unix seconds, got {text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (add Z or +01:00)")
    return moment.timestamp()


def range_of(args: argparse.Namespace, now: float) -> tuple[float, float]:
    """The range the flags ask for; ValueError with the line to print."""
    end = now if args.end is None else args.end
    start = end - args.since if args.since is not None else args.start
    if end > now + FUTURE_SLACK_SECONDS:
        raise ValueError(f"the range ends in the future ({end - now:.0f} s from now): "
                         "nothing is known of it yet")
    if start >= end:
        raise ValueError("the range's start is not before its end")
    if end - start > MAX_RANGE_SECONDS:
        raise ValueError(f"the range is {(end - start) / 86400:.1f} days, longer than "
                         f"{MAX_RANGE_SECONDS // 86400} days: report shorter ranges")
    if args.eval_interval * 2 > end - start:
        raise ValueError("the range is shorter than two evaluation steps")
    return start, end


def run(args: argparse.Namespace, out: TextIO) -> int:
    from exporter.rigctl.report.build import build
    from exporter.rigctl.report.query import Prometheus
    from exporter.rigctl.report.rules import alert_rules
    from exporter.rigctl.report.text import render

    try:
        start, end = range_of(args, time.time())
    except ValueError as exc:
        print(f"rigctl report: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    page = None
    if args.html is not None:
        try:
            page = importlib.import_module("exporter.rigctl.report.html")
        except ImportError as exc:
            print(f"rigctl report: --html needs matplotlib ({exc.name} is missing): "
                  "pip install 'rig-telemetry[html]'", file=sys.stderr)
            return EXIT_UNKNOWN
    selection = matchers(args.rig, args.job, args.instance)
    try:
        prometheus = Prometheus(args.prometheus, args.timeout, access_from_args(args))
        report = build(prometheus, start, end, alert_rules(selection, args.eval_interval),
                       selection, args.eval_interval, timeline=page is not None)
    except BadAnswer as exc:
        print(f"rigctl report: Prometheus' answer cannot be read: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except Unreachable as exc:
        print(f"rigctl report: cannot query Prometheus: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    if page is not None:
        try:
            args.html.write_text(page.render(report, Thresholds().decode_stall_critical_seconds))
        except OSError as exc:
            print(f"rigctl report: cannot write {args.html}: {exc.strerror}", file=sys.stderr)
            return EXIT_UNKNOWN
    if args.json:
        print(json.dumps(report.to_json(), indent=2), file=out)
    else:
        colour = is_tty(out)
        render(report, out, lambda text, status: coloured(text, status, colour))
    return EXIT_FOR_STATUS[report.verdict] if args.check else EXIT_OK

"""`rigctl health`: is the rig healthy, and if not, why.

It reads the exporter's /api/health (one check per concern, judged with the
same thresholds and conditions as the alert rules) and prints one line per
check, worst first. With --prometheus it adds the Rig* alerts firing in
Prometheus, and which of them Alertmanager silences.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from exporter.rigctl.client.health import health_report
from exporter.rigctl.client.http import BadAnswer, Unreachable, get_json, items
from exporter.rigctl.commands.common import (
    DEFAULT_EXPORTER,
    EXIT_CODES,
    EXIT_CRITICAL,
    EXIT_FOR_STATUS,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_WARNING,
    access_from_args,
    add_access_arguments,
    add_alerting_arguments,
    add_exporter_argument,
    add_timeout_argument,
    coloured,
    help_formatter,
    is_tty,
    positive,
)

EXIT_FOR_SEVERITY = {"critical": EXIT_CRITICAL, "warning": EXIT_WARNING}

EXAMPLES = f"""examples:
  rigctl health                                  the local exporter ({DEFAULT_EXPORTER})
  rigctl health --exporter http://rig:9842 --json
  rigctl health --prometheus http://127.0.0.1:9090 --watch 5

Each line: status, check, what it is about (engine, card, source), the value
and its threshold, and why. A check that needs a window the exporter has not
watched for yet (a rate over 5 minutes just after it started) is "unknown";
unknown checks do not change the exit status. A condition that holds but has
not yet held for its alert's hold time shows one step milder (a critical one
as warn), with the time held in the reason.

Firing alerts from --prometheus count too: a critical one that no silence
covers makes the exit status 2. Silences are Alertmanager's: --alertmanager
names it, else rigctl asks Prometheus which Alertmanager it sends to; without
one, silences are shown as unknown.

{EXIT_CODES}"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    health = commands.add_parser(
        "health", help="is the rig healthy? one line per check, worst first",
        description=__doc__.split("\n\n")[1], epilog=EXAMPLES, formatter_class=help_formatter)
    add_exporter_argument(health)
    health.add_argument("--json", action="store_true",
                        help="print the report as JSON (exporter/daemon/health/health.schema.json)")
    add_alerting_arguments(health, "also list the Rig* alerts firing in this Prometheus",
                           "ask this Alertmanager which alerts are silenced "
                           "(default: the one Prometheus sends to)")
    health.add_argument("--watch", type=positive(float), metavar="SECONDS",
                        help="redraw every SECONDS until interrupted")
    health.add_argument("--count", type=positive(int), metavar="N",
                        help="with --watch: stop after N redraws")
    add_timeout_argument(health, 10.0)
    add_access_arguments(health)
    return health


def run(args: argparse.Namespace, out: TextIO) -> int:
    if args.watch is None:
        return once(args, out)
    drawn = 0
    while True:  # until --count, Ctrl-C or a closed pipe (exporter.process.endings)
        if is_tty(out):
            out.write("\033[H\033[2J")  # home and clear: redraw in place
        elif drawn:
            print(file=out)
        code = once(args, out)
        out.flush()
        drawn += 1
        if args.count is not None and drawn >= args.count:
            return code
        time.sleep(args.watch)


def once(args: argparse.Namespace, out: TextIO) -> int:
    url = args.exporter + "/api/health"
    try:
        report = health_report(url, get_json(url, args.timeout, access_from_args(args)))
    except BadAnswer as exc:
        print(f"rigctl health: the exporter's answer is not a health report: {exc}",
              file=sys.stderr)
        return EXIT_UNKNOWN
    except Unreachable as exc:
        print(f"rigctl health: cannot reach the exporter: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    report["exporter"] = args.exporter
    problems = []
    if args.prometheus:
        try:
            report["alerts"] = firing_alerts(args.prometheus, args.alertmanager, args.timeout,
                                             problems)
        except Unreachable as exc:
            problems.append(f"cannot list alerts from Prometheus: {exc}")
    if args.json:
        print(json.dumps(report, indent=2), file=out)
    else:
        print_report(report, problems, out, colour=is_tty(out))
    return exit_code(report)


def exit_code(report: dict[str, Any]) -> int:
    code = EXIT_FOR_STATUS.get(report["status"], EXIT_UNKNOWN)
    if code == EXIT_UNKNOWN and report.get("alerts"):
        code = EXIT_OK  # nothing the exporter could judge, but Prometheus could
    for alert in report.get("alerts", []):
        if alert["state"] == "firing" and not alert["silenced"]:
            code = max(code, EXIT_FOR_SEVERITY.get(alert["severity"], EXIT_OK))
    return code


def firing_alerts(prometheus: str, alertmanager: str | None, timeout: float,
                  problems: list[str]) -> list[dict[str, Any]]:
    """Rig* alerts from Prometheus' /api/v1/alerts, marked silenced from Alertmanager.

    Prometheus does not know about silences; Alertmanager's /api/v2/alerts does
    (status.silencedBy). Alerts are matched on their labels.
    """
    url = prometheus + "/api/v1/alerts"
    alerts = [a for a in items(url, get_json(url, timeout), "data", "alerts")
              if str(_labels(a).get("alertname", "")).startswith("Rig")
              and a.get("state") == "firing"]
    silenced = None
    try:
        manager = alertmanager or discover_alertmanager(prometheus, timeout)
        if manager is not None:
            silenced = silenced_label_sets(manager, timeout)
        else:
            problems.append("Prometheus sends to no Alertmanager: silences unknown")
    except Unreachable as exc:
        problems.append(f"cannot read silences from Alertmanager: {exc}")
    out = []
    for alert in alerts:
        labels = {k: str(v) for k, v in _labels(alert).items()}
        out.append({
            "name": labels.get("alertname", ""),
            "severity": labels.get("severity", ""),
            "state": alert.get("state", "firing"),
            "silenced": None if silenced is None else any(
                labels.items() <= s.items() for s in silenced),
            "summary": str(_labels(alert, "annotations").get("summary", "")),
            "labels": labels,
        })
    rank = {"critical": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda a: (a["silenced"] is True, rank.get(a["severity"], 3),
                                      a["name"]))


def _labels(item: dict[str, Any], key: str = "labels") -> dict[str, Any]:
    value = item.get(key)
    return value if isinstance(value, dict) else {}


def discover_alertmanager(prometheus: str, timeout: float) -> str | None:
    url = prometheus + "/api/v1/alertmanagers"
    active = items(url, get_json(url, timeout), "data", "activeAlertmanagers")
    if not active:
        return None
    # e.g. http://127.0.0.1:9093/api/v2/alerts
    address = active[0].get("url")
    if not isinstance(address, str) or "/api/" not in address:
        raise BadAnswer(f"{url}: activeAlertmanagers[0] has no URL")
    return address.split("/api/")[0]


def silenced_label_sets(alertmanager: str, timeout: float) -> list[dict[str, str]]:
    # All alerts (Alertmanager's openapi.yaml: active, silenced and inhibited all
    # default to true); an alert is silenced when status.silencedBy names a silence.
    url = alertmanager + "/api/v2/alerts"
    return [_labels(a) for a in items(url, get_json(url, timeout))
            if _labels(a, "status").get("silencedBy")]


UNITS = {
    "s": lambda v: f"{v:.1f} s" if v < 100 else f"{v:.0f} s",
    "ratio": lambda v: f"{v * 100:.0f}%" if v >= 0.1 or v == 0 else f"{v * 100:.1f}%",
    "celsius": lambda v: f"{v:.0f} °C",
    "watts": lambda v: f"{v:.0f} W",
    "bytes/s": lambda v: f"{v / 1024 / 1024:.1f} MiB/s" if v >= 1024 * 1024
    else f"{v / 1024:.0f} KiB/s",
    "tokens/s": lambda v: f"{v:.0f} tok/s",
    "tokens": lambda v: f"{v:.0f} tok",
    "lanes": lambda v: f"x{v:.0f}",
    "transfers/s": lambda v: f"{v / 1e9:g} GT/s",
    "bool": lambda v: "yes" if v else "no",
}


def quantity(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return UNITS.get(unit, lambda v: f"{v:g}")(value)


#: The labels that name what a check or an alert is about, in the order they are looked for.
SUBJECT_LABELS = ("engine", "card", "source")


def subject(labels: dict[str, str]) -> str:
    return next((labels[k] for k in SUBJECT_LABELS if labels.get(k)), "rig")


def agent_rows(agents: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per agent that has sent anything: in flight, context, stalls, blame."""
    rows = []
    for a in agents:
        if not a["requests"] and not a["streams"] and not a["in_flight"]:
            continue
        waiting = sum(1 for f in a["in_flight"] if f["waiting"])
        context = "-" if a["context_ratio"] is None else f"{a['context_ratio'] * 100:.0f}%"
        prompt = "-" if a["last_prompt_tokens"] is None else f"{a['last_prompt_tokens']:,}"
        blamed = ", ".join(f"{by} {quantity(s, 's')}" for by, s in sorted(
            a["starved_seconds"].items(), key=lambda item: -item[1])) or "-"
        rows.append((a["agent"], a["engine"], f"{len(a['in_flight'])} ({waiting} waiting)",
                     quantity(a["longest_request_seconds"], "s"), prompt, context,
                     quantity(a["max_gap_seconds"], "s"), blamed))
    return rows


def print_agents(agents: list[dict[str, Any]], out: TextIO) -> None:
    rows = agent_rows(agents)
    if not rows:
        return
    header = ("AGENT", "ON", "IN FLIGHT", "OLDEST", "LAST PROMPT", "CONTEXT", "MAX GAP",
              "STARVED BY")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    print("\nagents (stream tap)", file=out)
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1],
              file=out)


def print_report(report: dict[str, Any], problems: list[str], out: TextIO,
                 colour: bool) -> None:
    checks = report["checks"]
    counts = {s: sum(1 for c in checks if c["status"] == s)
              for s in ("crit", "warn", "unknown", "ok")}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    when = time.strftime("%H:%M:%S", time.localtime(report["time"]))
    status = report["status"]
    print(f"rig {coloured(status.upper(), status, colour)}: {tally or 'no checks'}"
          f" ({report['exporter']} at {when})", file=out)
    rows = [(c["status"], c["name"], subject(c["labels"]), quantity(c["value"], c["unit"]),
             quantity(c["threshold"], c["unit"]) if c["unit"] != "bool" else "-",
             c["reason"]) for c in checks]
    header = ("STATUS", "CHECK", "ON", "VALUE", "THRESHOLD", "REASON")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + "  REASON",
          file=out)
    for row in rows:
        cells = [row[0].upper().ljust(widths[0]), *(c.ljust(w) for c, w in
                                                     zip(row[1:5], widths[1:], strict=True))]
        cells[0] = coloured(cells[0], row[0], colour)
        print("  ".join(cells) + "  " + row[5], file=out)
    print_agents(report.get("agents") or [], out)
    alerts = report.get("alerts")
    if alerts is not None:
        print(f"\nPrometheus: {len(alerts)} Rig* alert(s) firing", file=out)
        for alert in alerts:
            mark = {True: "  [silenced]", False: "", None: "  [silence unknown]"}[alert["silenced"]]
            status = {"critical": "crit", "warning": "warn"}.get(alert["severity"], "ok")
            where = subject(alert["labels"]) if set(alert["labels"]) & set(SUBJECT_LABELS) \
                else alert["labels"].get("instance", "")
            print(f"{coloured(alert['severity'].upper().ljust(8), status, colour)}  "
                  f"{alert['name']}  {where}  {alert['summary']}{mark}", file=out)
    for problem in problems:
        print(f"note: {problem}", file=out)

"""Prometheus checks (--prometheus URL): the exporter scraped and up, with a `rig`
label, every 15 s or less; the rule groups loaded and equal to what the
exporter's `[thresholds]` generate (alerts/generate.py); an Alertmanager attached.

Prometheus answers a rule's expression re-printed from its parse tree
(`[90s]` comes back as `[1m30s]`, `on(a)` as `on (a)`, modifiers may move), so
expressions are compared as multisets of tokens, numbers and durations by value:
any change of a threshold, a window or a hold shows, formatting does not.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from alerts.generate import build
from alerts.timescale import seconds
from exporter.rigctl.client.http import Unreachable, field, get_json, items
from exporter.rigctl.doctor.context import Context
from exporter.rigctl.doctor.report import Check, fail, ok, warn
from exporter.thresholds import Thresholds

#: Rates over the rules' windows and $__rate_interval assume this at most.
MAX_SCRAPE_INTERVAL_SECONDS = 15.0
#: Rules named in a detail; the rest are counted.
NAMED_RULES = 6
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPE = {"n": "\n", "t": "\t"}

_TOKEN = re.compile(r"""
    "(?:[^"\\]|\\.)*" | '(?:[^'\\]|\\.)*' | `[^`]*`               # strings
  | (?:\d+(?:ms|s|m|h|d|w|y))+(?![A-Za-z0-9_:])                  # durations: 1m30s
  | [A-Za-z_:][A-Za-z0-9_:]*                                     # names, keywords
  | 0x[0-9a-fA-F]+ | (?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?        # numbers
  | ==|!=|>=|<=|=~|!~|\S                                         # operators
""", re.VERBOSE)


@dataclass(frozen=True)
class PrometheusFindings:
    checks: list[Check]
    #: The exporter's scrape interval there, for the Grafana check; None if unknown.
    scrape_interval_seconds: float | None


def prometheus_checks(c: Context, prometheus: str,
                      alertmanager: str | None) -> PrometheusFindings:
    out: list[Check] = []
    interval = None
    try:
        target, how = _target(c, prometheus)
        out.append(target)
        if how is not None:
            check, interval = _interval(prometheus, how)
            out.append(check)
    except Unreachable as exc:
        out.append(fail("prometheus_target", "rig", f"cannot read Prometheus' targets: {exc}",
                        "check --prometheus: Prometheus' own URL, e.g. http://127.0.0.1:9090"))
    for judge in (_rules, _alertmanager):
        try:
            out.append(judge(c, prometheus, alertmanager))
        except Unreachable as exc:
            name = "prometheus_rules" if judge is _rules else "prometheus_alertmanager"
            out.append(fail(name, "rig", str(exc), "check --prometheus and --alertmanager"))
    return PrometheusFindings(out, interval)


def _target(c: Context, prometheus: str) -> tuple[Check, dict[str, Any] | None]:
    url = prometheus + "/api/v1/targets?state=active"
    targets = items(url, get_json(url, c.timeout), "data", "activeTargets")
    exporter = urlsplit(c.exporter)
    scrape_urls = {id(t): urlsplit(str(t.get("scrapeUrl", ""))) for t in targets}
    mine = [t for t in targets if scrape_urls[id(t)].netloc == exporter.netloc]
    matched = ""
    if not mine:  # the exporter's name there may differ from ours (rig:9842, 127.0.0.1:9842)
        mine = [t for t in targets if scrape_urls[id(t)].port == exporter.port]
        matched = " (matched by its port)"
    if not mine:
        return fail("prometheus_target", "rig", f"{prometheus} scrapes no target at "
                    f"{exporter.netloc} ({len(targets)} active targets)",
                    f"add {exporter.netloc} to a file_sd file with its rig label "
                    "(deploy/targets/rig.yml.example)"), None
    target = mine[0]
    labels = field(url, target, "labels", kind=dict)
    where = (f"{prometheus} scrapes {target.get('scrapeUrl')}{matched} as job "
             f"{labels.get('job', '?')}, instance {labels.get('instance', '?')}")
    health = target.get("health")
    if health != "up":
        return fail("prometheus_target", "rig", f"{where}: {health}: "
                    f"{target.get('lastError') or 'not scraped yet'}",
                    "make the exporter reachable from Prometheus at that address"), target
    if not labels.get("rig"):
        return fail("prometheus_target", "rig", f"{where}: up, without a rig label: the "
                    "dashboards and the alerts' notifications select on it",
                    "give the target a rig label in its file_sd file "
                    "(labels: {rig: NAME}, deploy/targets/)"), target
    return ok("prometheus_target", "rig", f"{where}, rig {labels['rig']}: up, scraped "
              f"{_age(target.get('lastScrape'))}"), target


def _age(stamp: object) -> str:
    """`2026-01-02T03:04:05.123456789Z` (Go's RFC 3339, nanoseconds) as an age."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", str(stamp))
    if match is None or match[1] < "1970":  # Go's zero time: never
        return "at an unknown time"
    when = datetime.fromisoformat(match[1] + (match[2] or "")[:7] + "+00:00")
    return f"{max(0.0, time.time() - when.timestamp()):.1f} s ago"


def _interval(prometheus: str, target: dict[str, Any]) -> tuple[Check, float | None]:
    # scrapeInterval from Prometheus 2.41; before, the discovered label holds it.
    discovered = target.get("discoveredLabels")
    text = target.get("scrapeInterval") or (
        discovered.get("__scrape_interval__") if isinstance(discovered, dict) else None)
    try:
        interval = seconds(str(text))
    except ValueError:
        return warn("prometheus_scrape_interval", "rig", f"{prometheus} gives no scrape "
                    f"interval for the exporter's target ({text!r})",
                    "check the job's scrape_interval in prometheus.yml"), None
    if interval > MAX_SCRAPE_INTERVAL_SECONDS:
        return warn("prometheus_scrape_interval", "rig", f"the exporter is scraped every "
                    f"{text}: the rules' 1m ranges then hold too few samples",
                    f"scrape_interval: 15s for job {target.get('labels', {}).get('job', '?')}"
                    " (deploy/prometheus.yml)"), interval
    return ok("prometheus_scrape_interval", "rig", f"the exporter is scraped every {text} "
              f"(at most {MAX_SCRAPE_INTERVAL_SECONDS:g} s)"), interval


def _rules(c: Context, prometheus: str, alertmanager: str | None) -> Check:
    url = prometheus + "/api/v1/rules"
    loaded = {str(g.get("name")): g for g in
              items(url, get_json(url, c.timeout), "data", "groups")}
    thresholds = c.config.thresholds if c.config is not None else Thresholds()
    source = ("the [thresholds] of the config" if c.config is not None
              else "the default [thresholds] (no --config.file)")
    expected = build(thresholds)["groups"]
    missing = [g["name"] for g in expected if g["name"] not in loaded]
    differ: list[str] = []
    broken: list[str] = []
    files = set()
    for group in expected:
        if group["name"] not in loaded:
            continue
        deployed = loaded[group["name"]]
        files.add(str(deployed.get("file", "")))
        theirs = {_key(r): r for r in items(url, deployed, "rules")}
        ours = {_key(r): r for r in group["rules"]}
        for key, rule in ours.items():
            other = theirs.get(key)
            what = "not loaded" if other is None else ", ".join(_differences(rule, other))
            if what:
                differ.append(f"{key[0]} ({what})")
            elif other.get("health") == "err":
                broken.append(f"{key[0]}: {other.get('lastError')}")
        differ += [f"{key[0]} (not generated from this table)" for key in theirs.keys() - ours]
    total = sum(len(g["rules"]) for g in expected)
    out_file = next(iter(files - {""}), "/etc/prometheus/rig/rig-rules.yaml")
    config = f" --config {c.config_path}" if c.config_path else ""
    fix = (f"python -m alerts.generate{config} --out {out_file}, then reload Prometheus "
           f"(curl -X POST {prometheus}/-/reload, or SIGHUP)")
    if missing:
        return fail("prometheus_rules", "rig", f"{prometheus} has not loaded the rule "
                    f"groups {', '.join(missing)}: their alerts cannot fire", fix)
    if broken:
        return fail("prometheus_rules", "rig", "rules that fail to evaluate: "
                    + "; ".join(broken[:NAMED_RULES]), "read Prometheus' log for the rule")
    if differ:
        named = ", ".join(differ[:NAMED_RULES]) + (
            f" and {len(differ) - NAMED_RULES} more" if len(differ) > NAMED_RULES else "")
        return warn("prometheus_rules", "rig", f"{len(differ)} of {total} rules in "
                    f"{prometheus} differ from what {source} generate: {named}", fix)
    return ok("prometheus_rules", "rig", f"{total} rules in {len(expected)} groups loaded, "
              f"equal to what {source} generate")


def _key(rule: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A rule's name and labels: an alert has one rule per severity or signal."""
    name = rule.get("alert") or rule.get("record") or rule.get("name") or ""
    labels = rule.get("labels")
    pairs = labels.items() if isinstance(labels, dict) else ()
    return str(name), tuple(sorted((str(k), str(v)) for k, v in pairs))


def _differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    found = []
    if _tokens(ours["expr"]) != _tokens(str(theirs.get("query", ""))):
        found.append("expression")
    hold = seconds(ours["for"]) if ours.get("for") else 0.0
    deployed = theirs.get("duration", 0) or 0
    if isinstance(deployed, int | float) and deployed != hold:
        found.append(f"for {deployed:g} s, {hold:g} s generated")
    if "alert" in ours and (theirs.get("annotations") or {}) != ours.get("annotations", {}):
        found.append("annotations")
    return found


def _tokens(expr: str) -> Counter[object]:
    return Counter(_token_value(token) for token in _TOKEN.findall(expr))


def _token_value(token: str) -> object:
    if token[0] in "\"'":
        return "string", _ESCAPE.sub(lambda m: _UNESCAPE.get(m[1], m[1]), token[1:-1])
    if token[0] == "`":
        return "string", token[1:-1]
    if token[0].isdigit() or token[0] == ".":
        try:
            if token.startswith("0x"):
                return "number", float(int(token, 16))
            return "number", seconds(token) if token[-1].isalpha() else float(token)
        except ValueError:
            return token  # a unit alerts.timescale does not read (w, y)
    return token


def _alertmanager(c: Context, prometheus: str, alertmanager: str | None) -> Check:
    url = prometheus + "/api/v1/alertmanagers"
    active = items(url, get_json(url, c.timeout), "data", "activeAlertmanagers")
    managers = [str(a.get("url", "")).split("/api/")[0] for a in active]
    if not managers:
        return fail("prometheus_alertmanager", "rig", f"{prometheus} sends its alerts to no "
                    "Alertmanager: nothing pages", "list the Alertmanager under "
                    "alerting.alertmanagers in prometheus.yml (deploy/prometheus.yml)")
    if alertmanager is not None and urlsplit(alertmanager).netloc not in {
            urlsplit(m).netloc for m in managers}:
        return warn("prometheus_alertmanager", "rig", f"{prometheus} sends to "
                    f"{', '.join(managers)}, not to --alertmanager {alertmanager}",
                    "point alerting.alertmanagers in prometheus.yml at the Alertmanager "
                    "that routes the rig's pages")
    manager = alertmanager or managers[0]
    status = f"{manager}/api/v2/status"
    try:
        cluster = field(status, get_json(status, c.timeout), "cluster", "status", kind=str)
    except Unreachable as exc:
        return fail("prometheus_alertmanager", "rig", f"{prometheus} sends to {manager}, "
                    f"which does not answer: {exc}", "start the Alertmanager, or correct "
                    "alerting.alertmanagers in prometheus.yml")
    return ok("prometheus_alertmanager", "rig", f"{prometheus} sends its alerts to "
              f"{', '.join(managers)}; {manager} answers (cluster {cluster})")

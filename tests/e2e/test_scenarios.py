"""Every scenario of `exporter.sim.scenarios` through the real pipeline: simulated
rig -> rig-exporter -> Prometheus 2.42 -> Alertmanager 0.25 -> webhook, fifteen times
faster than real time (stalls and the probe's deadline twice as fast only: a
2-core machine shared with other work stalls processes for a second or more). The
slow tier plays them once more five times faster only, so that Prometheus' 1 s
scrape stands for deploy/prometheus.yml's 5 s one of the rig's job.

All scenarios play at once, each on its own simulated rig (its own exporter, a
`rig` target label of its name) behind one Prometheus and one Alertmanager, so the
suite takes as long as the longest scenario. Each test then checks one rig: every
alert the scenario expects fires in Prometheus, and nothing else does for that
rig, so its `must_not` near misses stay quiet; each one that notifies (not info,
not inhibited by another of its alerts) is notified exactly once with its labels
and resolved exactly once, and nothing else is notified.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import ALERTMANAGER_CONFIG
from alerts.generate import RULES_PATH
from alerts.timescale import seconds
from exporter.process.launch import start_exporter
from exporter.rigctl.stack import Intervals, Monitoring, Notification, WebhookReceiver
from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios import SCENARIOS, Expect, Scenario
from exporter.sim.scenarios.player import play
from exporter.sim.scenarios.prefill_starves_decode import A, B
from tests.e2e import report
from tests.e2e.stack import LoopThread
from tests.e2e.tiles import instant, overview, tiles
from tests.support.checkout import REPO
from tests.support.cpu_load import BUSY, QUIET, tier_marks, under

pytestmark = pytest.mark.long_running(115)

SCRAPE_SECONDS = seconds(Intervals().scrape)  # Monitoring's Prometheus
# How many rig seconds one scrape stands for. The default run (and the contention
# tier) play at x15: a scrape every 15 rig seconds, deploy/prometheus.yml's global
# interval. The slow tier plays at the interval its rig job is scraped and evaluated
# at (5 s: x5, three times as long), the rate the rules see as deployed.
TIME_SCALE = 15.0
DEPLOYED_TIME_SCALE = seconds(Intervals.of_job(yaml.safe_load(
    (REPO / "deploy" / "prometheus.yml").read_text())).scrape) / SCRAPE_SECONDS
# (load, time scale) of each run of the module's stack.
RUNS = [*(pytest.param((load, TIME_SCALE), id=load, marks=tier_marks(load))
          for load in (QUIET, BUSY)),
        pytest.param((QUIET, DEPLOYED_TIME_SCALE), id="deployed-scrape",
                     marks=pytest.mark.slow)]
STALL_SCALE = 2.0
# The wedged engine's stream probe must time out well before its heal: its deadline
# (60 s / the rig's stall scale, real seconds) at x2 would be 450 rig seconds, and the
# page would come a few seconds before the heal. No rule it trips reads a stall.
# The stutter's 3.997 s pauses must read as 1-5 s real (the rules' 2-10 s at x2) on a
# busy box, where the tracker's bracket widens with its budget's poll spacing: at x2
# (2.0 s) the lower bound, a poll and an answer short, fell under the tracker's 1 s
# floor (MIN_STALL_SECONDS) and stalls went unseen; at x1.5 (2.7 s) a slow answer
# once stretched an upper bound until the middle read 5 s, a starvation page. x1.75
# (2.3 s) leaves room on both sides.
RIG_STALL_SCALES = {"engine-wedged": 5.0, "mixed-chunk-stutter": 1.75}
# Fifteen simulated engines render /metrics in this one process: the stall
# tracker polls at 2 Hz (0.5 s resolves the 5 s compressed threshold), and the
# rigs tick at 4 Hz.
STALL_POLL_SECONDS = 0.5
TICK_SECONDS = 0.25
# After the last scenario ends: the stutter rule's 10 min window and a
# group_interval in rig seconds, then real seconds of slack.
RESOLVE_RIG_SECONDS = 1200.0
RESOLVE_SLACK_SECONDS = 40.0
# After the last resolution: long enough for a duplicate or a stray page.
HOLD_SECONDS = 6.0
WARMUP_SECONDS = 6.0
SCENARIO_LIST = [SCENARIOS[name] for name in sorted(SCENARIOS)]
# The committed routing and rules, read once.
ROUTING = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
RULES = [rule for group in yaml.safe_load(RULES_PATH.read_text())["groups"]
         for rule in group["rules"]]


def paging(scenario: Scenario) -> list[Expect]:
    """The expected alerts that notify someone: not info, and not inhibited by another
    of the scenario's alerts under alertmanager.yml's inhibit_rules."""
    return [e for e in scenario.expects if e.labels["severity"] != "info"
            and not any(_inhibits(rule, source, e) for rule in ROUTING["inhibit_rules"]
                        for source in scenario.expects if source is not e)]


_MATCHER = re.compile(r'\s*(\w+)\s*(=~|=)\s*"(.*)"\s*$')


def _labels(expect: Expect) -> dict[str, str]:
    return {"alertname": expect.alert, **expect.labels}


def _matches_all(matchers: list[str], labels: dict[str, str]) -> bool:
    for matcher in matchers:
        found = _MATCHER.match(matcher)
        assert found, f"matcher this test cannot read: {matcher!r}"
        name, op, value = found.groups()
        have = labels.get(name, "")
        if not (re.fullmatch(value, have) if op == "=~" else have == value):
            return False
    return True


def _inhibits(rule: dict[str, Any], source: Expect, target: Expect) -> bool:
    """Labels a scenario's expectation leaves out (instance, rig) are the same rig's."""
    src, tgt = _labels(source), _labels(target)
    return (_matches_all(rule["source_matchers"], src)
            and _matches_all(rule["target_matchers"], tgt)
            and all(src[k] == tgt[k] for k in rule.get("equal", []) if k in src and k in tgt))


def matches(expect: Expect, labels: dict[str, str]) -> bool:
    return labels.get("alertname") == expect.alert and all(
        labels.get(k) == v for k, v in expect.labels.items())


@dataclass
class Run:
    addresses: dict[str, str]
    fault_at: dict[str, float]  # time.monotonic() of each scenario's fault
    time_scale: float
    notifications: list[Notification] = field(default_factory=list)
    # Every alert that fired in Prometheus during the run, by rig (labels
    # without alertstate).
    fired: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    # The run's Prometheus (still up while the tests run) and its wall-clock span.
    prometheus_url: str = ""
    started: float = 0.0
    ended: float = 0.0


def rig_alerts(notifications: list[Notification], rig: str) -> Iterator[tuple[Notification,
                                                                             dict[str, Any]]]:
    for notification in notifications:
        for alert in notification.payload["alerts"]:
            if alert["labels"].get("rig") == rig:
                yield notification, alert


def identity(alert: dict[str, Any]) -> frozenset[tuple[str, str]]:
    return frozenset(alert["labels"].items())


def _all_resolved(notifications: list[Notification]) -> bool:
    return all(any(matches(e, a["labels"]) and a["status"] == "resolved"
                   for _, a in rig_alerts(notifications, s.name))
               for s in SCENARIO_LIST for e in paging(s))


def _wait_targets_up(monitoring: Monitoring, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        up = monitoring.query('up{job="rig"} == 1')
        if len(up) == count:
            return
        assert time.monotonic() < deadline, f"{len(up)} of {count} targets up"
        time.sleep(0.5)


@pytest.fixture(scope="module", params=RUNS)
def run(tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> Iterator[Run]:
    load, time_scale = request.param
    workdir: Path = tmp_path_factory.mktemp("e2e")
    with contextlib.ExitStack() as stack:
        stack.enter_context(under(load))  # from the stack's start to the last test
        loop = LoopThread()
        stack.callback(loop.stop)
        receiver = WebhookReceiver()
        loop.run(receiver.start())
        stack.callback(lambda: loop.run(receiver.stop()))
        rigs: dict[str, SimRig] = {}
        exporters = {}
        for scenario in SCENARIO_LIST:
            rig = SimRig(time_scale, directory=workdir / scenario.name,
                         stall_scale=RIG_STALL_SCALES.get(scenario.name, STALL_SCALE),
                         tick_seconds=TICK_SECONDS)
            loop.run(rig.start())
            stack.callback(lambda r=rig: loop.run(r.stop()))
            exporter = stack.enter_context(start_exporter(
                rig.exporter_args(stall_poll_seconds=STALL_POLL_SECONDS,
                                  compress_stall_window=True),
                workdir / scenario.name, wait=False))
            rigs[scenario.name], exporters[scenario.name] = rig, exporter
        for exporter in exporters.values():
            exporter.wait_ready()
        monitoring = Monitoring(workdir / "monitoring", time_scale, receiver.url,
                                stall_scale=STALL_SCALE)
        stack.callback(monitoring.stop)
        monitoring.start()
        monitoring.write_targets([(name, e.address) for name, e in exporters.items()])
        _wait_targets_up(monitoring, len(rigs))
        time.sleep(WARMUP_SECONDS)

        run = Run({name: e.address for name, e in exporters.items()}, {}, time_scale,
                  prometheus_url=monitoring.prometheus_url, started=time.time())

        async def play_one(scenario: Scenario) -> None:
            run.fault_at[scenario.name] = time.monotonic() + (scenario.fault_at or 0) / time_scale
            await play(rigs[scenario.name], scenario)

        async def play_all() -> None:
            await asyncio.gather(*(play_one(s) for s in SCENARIO_LIST))

        longest = max(s.seconds for s in SCENARIO_LIST) / time_scale
        loop.run(play_all(), timeout=longest + 30)
        deadline = time.monotonic() + RESOLVE_RIG_SECONDS / time_scale + RESOLVE_SLACK_SECONDS
        while not loop.call(lambda: _all_resolved(receiver.notifications)) \
                and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(HOLD_SECONDS)  # a late duplicate still counts
        run.notifications = loop.call(lambda: list(receiver.notifications))
        for result in monitoring.query('max_over_time(ALERTS{alertstate="firing"}[1h])'):
            labels = {k: v for k, v in result["metric"].items() if k != "alertstate"}
            run.fired.setdefault(labels.get("rig", ""), []).append(labels)
        run.ended = time.time()
        yield run


def _rule(expect: Expect) -> dict[str, Any]:
    for rule in RULES:
        if rule.get("alert") == expect.alert and all(
                expect.labels.get(k) == v for k, v in rule["labels"].items()):
            return rule
    raise AssertionError(f"no rule {expect}")


def _group_wait(severity: str) -> float:
    route = ROUTING["route"]
    for child in route["routes"]:
        if child["matchers"] == [f'severity="{severity}"']:
            return seconds(child.get("group_wait", route["group_wait"]))
    return seconds(route["group_wait"])


def scrape_record(run: Run, rig: str) -> str:
    """How Prometheus fared with the rig's exporter over the run: a failed scrape
    leaves every series stale, and each alert's `for` starts again."""
    span = f"{max(1, round(run.ended - run.started))}s"
    facts = {
        "failed scrapes": f'count_over_time((up{{rig="{rig}"}} == 0)[{span}:1s])',
        "slowest scrape (s)": f'max_over_time(scrape_duration_seconds{{rig="{rig}"}}[{span}])',
        "sources down at some scrape": f'count(max_over_time((rig_source_up{{rig="{rig}"}} == 0)'
                                       f"[{span}:1s]))",
        # What the stall rules read, in real seconds: the tracker's middle, the tap's gap.
        "longest stall read (s)": f'max(max_over_time(((rig_engine_decode_stall_max_seconds'
                                  f'{{rig="{rig}"}} + rig_engine_decode_stall_max_upper_seconds'
                                  f'{{rig="{rig}"}}) / 2)[{span}:1s]))',
        "longest stream gap (s)": f'max(max_over_time(rig_stream_max_token_gap_seconds'
                                  f'{{rig="{rig}"}}[{span}]))',
        # One series per card or signal; each counts its own evaluations.
        "evaluations pending": f'sum by (alertname) (count_over_time('
                               f'ALERTS{{rig="{rig}",alertstate="pending"}}[{span}]))',
    }
    said = []
    for fact, promql in facts.items():
        found = instant(run.prometheus_url, promql, run.ended)
        said.append(f"{fact}: " + (", ".join(
            f"{r['metric'].get('alertname', '')} {r['value'][1]}".strip() for r in found)
            or "none"))
    return "; ".join(said)


@pytest.mark.parametrize("scenario", SCENARIO_LIST, ids=[s.name for s in SCENARIO_LIST])
def test_scenario_pages_exactly_what_it_should(run: Run, scenario: Scenario,
                                               request: pytest.FixtureRequest) -> None:
    received = list(rig_alerts(run.notifications, scenario.name))
    firing = [(n, a) for n, a in received if a["status"] == "firing"]
    fired = Counter(identity(a) for _, a in firing)
    cleared = Counter(identity(a) for _, a in received if a["status"] == "resolved")

    rows = []
    for expect in paging(scenario):
        matching = [i for i in fired if matches(expect, dict(i))]
        first = min((n.arrived for n, a in firing if matches(expect, a["labels"])), default=None)
        rows.append(report.Row(
            scenario.name, f"{expect.alert}{dict(expect.labels)}",
            sum(fired[i] for i in matching),
            None if first is None else first - run.fault_at[scenario.name],
            seconds(_rule(expect).get("for", "0s")), _group_wait(expect.labels["severity"]),
            run.time_scale, sum(cleared[i] for i in matching)))
    report.record(request, rows)

    unexpected = [dict(i) for i in fired if not any(matches(e, dict(i)) for e in paging(scenario))]
    assert not unexpected, f"unexpected notifications: {unexpected}"
    for expect in paging(scenario):
        matching = [i for i in fired if matches(expect, dict(i))]
        assert len(matching) == 1, (f"{expect}: {len(matching)} alerts: {matching}; "
                                    f"{scrape_record(run, scenario.name)}")
        (alert,) = matching
        assert fired[alert] == 1, f"{expect} paged {fired[alert]} times"
        assert cleared[alert] == 1, f"{expect} resolved {cleared[alert]} times"
        notes = next(a["annotations"] for _, a in firing if identity(a) == alert)
        assert notes["summary"] and notes["description"] and notes["runbook_url"], notes

    in_prometheus = run.fired.get(scenario.name, [])
    for expect in scenario.expects:
        assert any(matches(expect, labels) for labels in in_prometheus), (
            f"{expect} never fired in Prometheus: {in_prometheus}; "
            f"{scrape_record(run, scenario.name)}")
    stray = [labels for labels in in_prometheus
             if not any(matches(e, labels) for e in scenario.expects)]
    assert not stray, f"fired in Prometheus but not expected: {stray}"


def test_healthy_rig_fires_nothing_for_the_whole_run(run: Run) -> None:
    assert not list(rig_alerts(run.notifications, "healthy"))
    assert not run.fired.get("healthy")


def test_every_notification_names_a_rig_and_goes_to_its_severitys_receiver(run: Run) -> None:
    receivers = {"critical": "/page", "warning": "/notify"}
    for notification in run.notifications:
        for alert in notification.payload["alerts"]:
            assert alert["labels"].get("rig") in run.addresses, alert["labels"]
            assert notification.path == receivers[alert["labels"]["severity"]], alert["labels"]


def test_an_alert_names_its_rig_and_leaves_the_other_rigs_silent(run: Run) -> None:
    """Many rigs behind one Prometheus (deploy/prometheus.yml's file_sd, one `rig`
    label per target): the pulled card pages for its own rig only."""
    pages = [a for n in run.notifications for a in n.payload["alerts"]
             if a["labels"]["alertname"] == "RigGpuMissing" and a["status"] == "firing"]
    assert pages, "no RigGpuMissing page"
    for alert in pages:
        assert alert["labels"]["rig"] == "gpu-missing"
        assert alert["labels"]["instance"] == run.addresses["gpu-missing"]


def test_info_alerts_fire_in_prometheus_and_notify_nobody(run: Run) -> None:
    """Both cards at their 305 W cap with PPT0 set (power-capped): RigGpuPowerCapped
    fires for each, and the `null` receiver keeps it quiet."""
    capped = {labels["card"] for labels in run.fired.get("power-capped", [])
              if labels["alertname"] == "RigGpuPowerCapped"}
    assert capped == {"card1", "card2"}
    assert not [a for n in run.notifications for a in n.payload["alerts"]
                if a["labels"]["severity"] == "info"]


def test_the_starvation_page_names_the_agent_stalled_and_the_agent_blamed(run: Run) -> None:
    """prefill-starves-decode: A's gap came while B's first token was pending, so the
    tap blames B, and the page says so."""
    pages = [a for _, a in rig_alerts(run.notifications, "prefill-starves-decode")
             if a["labels"]["alertname"] == "RigDecodeStarvation" and a["status"] == "firing"]
    assert pages
    assert f"Agent {A} stalled, blamed on {B}" in pages[0]["annotations"]["description"], pages


# Tiles a scenario turns short of any alert, and why. four-agents-hog: the stream
# probe queues behind the three waiting agents (FCFS: SGLang's scheduler stops at the
# first request that does not fit) past its deadline, so one probe fails and the
# Engines tile says so; RigEngineWedged needs 5 min of failed probes. And at its heal
# the simulated rig restores its synthetic KV load at once, while the agents' hang-up
# reaches the engine through the tap in real time: for that moment the pool reads
# full, far short of RigKVPoolSaturated's 5 min. working-set-overflow: each turn
# recomputes a 126K session for about 2 min, and a request that arrives meanwhile (the
# stream probe's, or the other agent's turn when the busy box runs the scenario late)
# waits behind it for a moment, far short of RigQueueHeadOfLine's 5 min (seen in two of
# five full-suite runs).
TILES_SHORT_OF_AN_ALERT = {"four-agents-hog": {"Engines", "KV pool"},
                           "working-set-overflow": {"Queue behind a running request"}}
# The colour a tile may take in any scenario, because of the machine and not the rig:
# with stalls compressed twice, the longest gap's orange step (the 2 s stutter) is 1 s
# of real time, which a loaded 2-core box's scheduling alone can reach. Red (the
# starvation's 5 s) stays stray.
HICCUP_COLOURS = {"Decode: longest gap": "(orange)"}


@pytest.mark.parametrize("scenario", SCENARIO_LIST, ids=[s.name for s in SCENARIO_LIST])
def test_overview_tile_for_the_scenario_turns_and_no_other(run: Run,
                                                           scenario: Scenario) -> None:
    """Over the whole run of the scenario's rig, each overview tile that shows one of its
    alerts crosses its threshold, and every other tile stays green (the same Prometheus
    as the alerts above: no second playing)."""
    expected = {e.alert for e in scenario.expects}
    found = tiles(overview_at(run.time_scale), run.prometheus_url, scenario.name,
                  run.started, run.ended, run.time_scale, SCRAPE_SECONDS)
    assert len(found) >= 17, [t.title for t in found]
    quiet = [f"{t.title}: {t.values}" for t in found if t.shows & expected and not t.crossed]
    assert not quiet, f"{scenario.name}: tiles that should cross and did not: {quiet}"
    also = TILES_SHORT_OF_AN_ALERT.get(scenario.name, set())
    stray = [f"{t.title}: {t.crossed}" for t in found
             if t.crossed and not t.shows & expected and t.title not in also
             and not _only_hiccups(t)]
    assert not stray, f"{scenario.name}: tiles that crossed for nothing expected: {stray}"


@functools.cache
def overview_at(time_scale: float) -> dict[str, Any]:
    """The overview generated from the run's own scaled thresholds, once per scale."""
    return overview(time_scale, STALL_SCALE)


def _only_hiccups(tile) -> bool:
    """Every series past a threshold sits at the colour the machine alone can reach."""
    colour = HICCUP_COLOURS.get(tile.title)
    return colour is not None and all(row.endswith(colour) for row in tile.crossed)

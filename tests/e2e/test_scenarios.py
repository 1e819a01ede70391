"""Every scenario through the real pipeline: simulated rig -> rig-exporter ->
Prometheus 2.42 -> Alertmanager 0.25 -> webhook, in compressed time.

All scenarios run at once, each on its own simulated rig (its own exporter, a
`rig` target label of its name) behind one Prometheus and one Alertmanager, so
the suite takes as long as the slowest scenario. Each test then checks one rig's
notifications: every expected alert exactly once with its labels, nothing else,
and each resolution exactly once after the fault heals. `healthy` runs for the
whole suite and must receive nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.generate import RULES_PATH
from alerts.timescale import seconds
from exporter.rigctl.stack import ALERTMANAGER_CONFIG, Monitoring, Notification, WebhookReceiver
from exporter.rigctl.tour import SCENARIOS, TICK_SECONDS, Scenario, TourRig
from tests.e2e import report
from tests.e2e.stack import LoopThread

TIME_SCALE = 10.0
# Stall lengths compress 2-fold only (the 10 s threshold reads 5 s, the 47.23 s
# stall lasts 23.6 s): a 2-core machine shared with other work stalls processes
# for a second or more, which the stall tracker would rightly report at 10-fold.
STALL_SCALE = 2.0
# Wall-clock allowances on top of each scenario's own (compressed) deadline: a
# 2-core machine shared with other work schedules processes late.
SLACK_SECONDS = 30.0
# After the last expected page: long enough for a duplicate or a stray page.
HOLD_SECONDS = 6.0
# The tracker's 60 s stall window (unscaled) plus a group_interval, and slack.
RESOLVE_SECONDS = 120.0
WARMUP_SECONDS = 6.0


@dataclass
class Timeline:
    fault_at: float = 0.0
    healed_at: float = 0.0


@dataclass
class Run:
    rigs: dict[str, TourRig]
    timelines: dict[str, Timeline]
    notifications: list[Notification] = field(default_factory=list)
    # Info alerts firing in Prometheus at the end of the run.
    info_firing: list[dict[str, str]] = field(default_factory=list)


def rig_alerts(notifications: list[Notification], rig: str) -> Iterator[tuple[Notification,
                                                                             dict[str, Any]]]:
    for notification in notifications:
        for alert in notification.payload["alerts"]:
            if alert["labels"].get("rig") == rig:
                yield notification, alert


def identity(alert: dict[str, Any]) -> frozenset[tuple[str, str]]:
    return frozenset(alert["labels"].items())


def _all_arrived(receiver: WebhookReceiver, scenario: Scenario, status: str) -> bool:
    seen = [a["labels"] for _, a in rig_alerts(receiver.notifications, scenario.name)
            if a["status"] == status]
    return all(any(e.matches(labels) for labels in seen) for e in scenario.expected)


async def play(scenario: Scenario, rig: TourRig, receiver: WebhookReceiver,
               timeline: Timeline) -> None:
    """Fault, wait for its pages (ticking the counters), hold, heal, wait for resolutions."""
    if not scenario.expected:
        return
    last = time.monotonic()

    async def tick_until(done: object, deadline: float, ticking: bool) -> None:
        nonlocal last
        while time.monotonic() < deadline and not (callable(done) and done()):
            await asyncio.sleep(TICK_SECONDS)
            now = time.monotonic()
            if ticking:
                scenario.tick(rig, now - last)
            last = now

    timeline.fault_at = last = time.monotonic()
    scenario.fault(rig)
    await tick_until(lambda: _all_arrived(receiver, scenario, "firing"),
                     timeline.fault_at + scenario.fire_within / TIME_SCALE + SLACK_SECONDS, True)
    await tick_until(None, time.monotonic() + HOLD_SECONDS, True)
    timeline.healed_at = time.monotonic()
    scenario.heal(rig)
    await tick_until(lambda: _all_arrived(receiver, scenario, "resolved"),
                     timeline.healed_at + RESOLVE_SECONDS, False)


def _wait_targets_up(monitoring: Monitoring, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        up = monitoring.query('up{job="rig"} == 1')
        if len(up) == count:
            return
        assert time.monotonic() < deadline, f"{len(up)} of {count} targets up"
        time.sleep(0.5)


def _wait_exporter(rig: TourRig, timeout: float = 30) -> None:
    assert rig.exporter is not None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{rig.exporter_address}/-/healthy", timeout=2):
                return
        except OSError:
            assert rig.exporter.popen.poll() is None, rig.exporter.log()
            assert time.monotonic() < deadline, rig.exporter.log()
            time.sleep(0.1)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir: Path = tmp_path_factory.mktemp("e2e")
    with contextlib.ExitStack() as stack:
        loop = LoopThread()
        stack.callback(loop.stop)
        receiver = WebhookReceiver()
        loop.run(receiver.start())
        stack.callback(lambda: loop.run(receiver.stop()))
        rigs: dict[str, TourRig] = {}
        for scenario in SCENARIOS:
            rig = TourRig(scenario.name, workdir / scenario.name, TIME_SCALE, STALL_SCALE)
            rig.workdir.mkdir()
            loop.run(rig.start_engine())
            stack.callback(lambda r=rig: loop.run(r.server.stop()))
            rig.write_files()
            # 2 Hz, not 4: ten simulators render /metrics in this one process, and
            # 0.5 s resolves the 5 s stall threshold.
            rig.start_exporter(stall_poll_seconds=0.5)
            stack.callback(rig.exporter.stop)
            rigs[scenario.name] = rig
        for rig in rigs.values():
            _wait_exporter(rig)
        monitoring = Monitoring(workdir / "monitoring", TIME_SCALE, receiver.url,
                                stall_scale=STALL_SCALE)
        stack.callback(monitoring.stop)
        monitoring.start()
        monitoring.write_targets([(r.name, r.exporter_address) for r in rigs.values()])
        _wait_targets_up(monitoring, len(rigs))
        time.sleep(WARMUP_SECONDS)

        timelines = {s.name: Timeline() for s in SCENARIOS}

        async def play_all() -> None:
            await asyncio.gather(*(play(s, rigs[s.name], receiver, timelines[s.name])
                                   for s in SCENARIOS))

        longest = max(s.fire_within for s in SCENARIOS) / TIME_SCALE
        loop.run(play_all(), timeout=longest + 2 * SLACK_SECONDS + HOLD_SECONDS
                 + RESOLVE_SECONDS + 30)
        time.sleep(HOLD_SECONDS)  # a late duplicate still counts
        info = monitoring.query('ALERTS{severity="info",alertstate="firing"}')
        yield Run(rigs, timelines, loop.call(lambda: list(receiver.notifications)),
                  [a["metric"] for a in info])


def _rule(alertname: str, labels: dict[str, str]) -> dict[str, Any]:
    for group in yaml.safe_load(RULES_PATH.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alertname and all(
                    labels.get(k) == v for k, v in rule["labels"].items()):
                return rule
    raise AssertionError(f"no rule {alertname} {labels}")


def _group_wait(severity: str) -> float:
    route = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["route"]
    for child in route["routes"]:
        if child["matchers"] == [f'severity="{severity}"']:
            return seconds(child.get("group_wait", route["group_wait"]))
    return seconds(route["group_wait"])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_pages_exactly_what_it_should(run: Run, scenario: Scenario) -> None:
    timeline = run.timelines[scenario.name]
    received = list(rig_alerts(run.notifications, scenario.name))
    firing = [(n, a) for n, a in received if a["status"] == "firing"]
    resolved = [(n, a) for n, a in received if a["status"] == "resolved"]
    fired = Counter(identity(a) for _, a in firing)
    cleared = Counter(identity(a) for _, a in resolved)

    unexpected = [dict(i) for i in fired if not any(e.matches(dict(i)) for e in scenario.expected)]
    rows = []
    for expected in scenario.expected:
        matching = [i for i in fired if expected.matches(dict(i))]
        first = min((n.arrived for n, a in firing if expected.matches(a["labels"])), default=None)
        rule = _rule(expected.alertname, expected.labels)
        rows.append(report.Row(
            scenario.name, f"{expected.alertname}{expected.labels}",
            sum(fired[i] for i in matching),
            None if first is None else first - timeline.fault_at,
            seconds(rule.get("for", "0s")), _group_wait(expected.labels["severity"]),
            TIME_SCALE, sum(cleared[i] for i in matching)))
    report.ROWS.extend(rows)

    assert not unexpected, f"unexpected notifications: {unexpected}"
    for expected, row in zip(scenario.expected, rows, strict=True):
        matching = [i for i in fired if expected.matches(dict(i))]
        assert len(matching) == 1, f"{expected}: {len(matching)} alerts: {matching}"
        (alert,) = matching
        assert fired[alert] == 1, f"{expected} paged {fired[alert]} times"
        assert cleared[alert] == 1, f"{expected} resolved {cleared[alert]} times"
        notes = next(a["annotations"] for _, a in firing if identity(a) == alert)
        assert expected.says in notes["description"], notes["description"]
        assert row.after_fault_seconds is not None and row.after_fault_seconds >= 0
    for notification, alert in resolved:
        assert notification.arrived >= timeline.fault_at, alert


def test_healthy_rig_pages_nothing_for_the_whole_run(run: Run) -> None:
    assert not list(rig_alerts(run.notifications, "healthy"))


def test_every_notification_names_a_rig_and_goes_to_its_severitys_receiver(run: Run) -> None:
    receivers = {"critical": "/page", "warning": "/notify"}
    for notification in run.notifications:
        for alert in notification.payload["alerts"]:
            assert alert["labels"].get("rig") in run.rigs, alert["labels"]
            assert notification.path == receivers[alert["labels"]["severity"]], alert["labels"]


def test_an_alert_names_its_rig_and_leaves_the_other_rigs_silent(run: Run) -> None:
    """Many rigs behind one Prometheus (deploy/prometheus.yml's file_sd, one `rig`
    label per target): the pulled card pages for its own rig only."""
    pages = [(n, a) for n in run.notifications for a in n.payload["alerts"]
             if a["labels"]["alertname"] == "RigGpuMissing" and a["status"] == "firing"]
    assert pages, "no RigGpuMissing page"
    for _, alert in pages:
        assert alert["labels"]["rig"] == "gpu-missing"
        assert alert["labels"]["instance"] == run.rigs["gpu-missing"].exporter_address


def test_info_alerts_fire_in_prometheus_and_notify_nobody(run: Run) -> None:
    """card2 of every simulated rig sits at its 305 W cap with the PPT bit set
    (rig-facts): RigGpuPowerCapped fires, and the `null` receiver keeps it quiet."""
    capped = [a for a in run.info_firing if a["alertname"] == "RigGpuPowerCapped"]
    assert "healthy" in {a["rig"] for a in capped}, run.info_firing
    assert all(a["card"] == "card2" for a in capped)
    assert not [a for n in run.notifications for a in n.payload["alerts"]
                if a["labels"]["severity"] == "info"]

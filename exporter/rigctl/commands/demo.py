"""`rigctl demo`: the whole stack on a machine with no GPU and no SGLang.

It starts the simulated rig (`exporter.sim`: the simulated SGLang server, two
7900 XTX cards in a sysfs tree, the host's /proc files), a real `rig-exporter`
reading it, and, when they are installed, Prometheus and Alertmanager with
time-scaled copies of the rules and routing. Then it plays a tour of the
scenarios (`exporter.sim.scenarios`, the ones the end-to-end tests assert on),
and prints as they happen each step of a scenario, each alert going pending,
firing and resolved in Prometheus, and each notification Alertmanager sends. It ends
with `rigctl report` of the tour's own span.

Every time it prints is the rig's: the clock on the left counts the rig's
life (h:mm:ss), [brackets] the scenario's seconds, and the notifications read
as the rig's own would (alerts/timescale.py). Only decode stalls compress less
than the rest, 2-fold at most, as the start-up line says.

Ctrl-C, SIGTERM, or a reader that stops reading (| head), stops everything it
started (each process in its own process group) and removes its temporary
directory, within 2 s whatever is in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from exporter.process.endings import Interrupted, Say
from exporter.process.launch import ExporterProcess, Process, start_exporter, stop_together
from exporter.rigctl.client.http import Unreachable, read_text
from exporter.rigctl.commands.common import EXIT_ENDINGS, EXIT_OK, EXIT_UNKNOWN
from exporter.rigctl.report.build import build
from exporter.rigctl.report.query import Prometheus
from exporter.rigctl.report.rules import alert_rules, matchers, parse_duration
from exporter.rigctl.report.text import render
from exporter.rigctl.stack import Monitoring, Notification, WebhookReceiver
from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios import SCENARIOS, Expect, Scenario
from exporter.sim.scenarios.player import play

# The `rig` label of the demo's exporter in Prometheus.
DEMO_RIG = "demo"
# The healthy rig, then the failures the project exists to show: the agents' own
# (who starved whom, who holds the engine) among them.
TOUR = ("healthy", "prefill-starves-decode", "four-agents-hog", "thermal-downclock",
        "hicache-thrash", "swap-storm")
#: A llama.cpp rig has no HiCache and no probe (the probe speaks SGLang's /generate):
#: the scenarios that do not rest on them.
LLAMACPP_TOUR = ("healthy", "prefill-starves-decode")
DEFAULT_SPEED = 10.0
# Stall lengths compress at most 2-fold, as in the end-to-end tests: a busy
# machine's scheduling hiccups must stay below the compressed 10 s threshold.
MAX_STALL_SCALE = 2.0
WATCH_SECONDS = 1.0
# How long the healthy rig is watched (the rig's seconds).
HEALTHY_SECONDS = 120.0
# Bounds on the wait for the last alerts: resolution, then its notification
# (Alertmanager sends resolutions at the next group_interval: 5 min, 30 s at x10).
SETTLE_SECONDS = 150.0
NOTIFY_SECONDS = 45.0
# Until Prometheus scrapes the exporter; then a minute of the rig's healthy life.
STARTUP_SECONDS = 60.0
WARMUP_SECONDS = 60.0
# The stop, from the signal: the tour has this long to end at its cancellation
# (whatever it awaits); then every process it started gets SIGTERM at once, and
# SIGKILL if still there after CHILDREN_STOP_SECONDS. The sum stays under the 2 s a
# stop may take (docs/rigctl.md#how-the-demo-stops).
TOUR_CANCEL_SECONDS = 0.2
CHILDREN_STOP_SECONDS = 1.0


EXIT_CODES = f"""exit status:
  0  the tour is done, or --list
  3  bad arguments or an unknown scenario
{EXIT_ENDINGS}"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "demo", help="run the simulated rig through the whole stack and watch its alerts",
        description="\n\n".join(__doc__.split("\n\n")[1:]), epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help=f"play this scenario (repeatable; default: {', '.join(TOUR)})")
    parser.add_argument("--list", action="store_true",
                        help="list the scenarios with their lengths, then exit")
    parser.add_argument("--speed", type=float, default=DEFAULT_SPEED, metavar="F",
                        help=f"time runs F times faster than real (default {DEFAULT_SPEED:g})")
    parser.add_argument("--engine-kind", choices=("sglang", "llamacpp"), default="sglang",
                        help="play an SGLang rig or a llama.cpp one (a simulated llama-server "
                             f"on the same scheduler; default tour there: "
                             f"{', '.join(LLAMACPP_TOUR)})")
    parser.add_argument("--no-monitoring", action="store_true",
                        help="do not start Prometheus and Alertmanager even if installed")
    return parser


def run(args: argparse.Namespace, out: TextIO) -> int:
    kind = getattr(args, "engine_kind", "sglang")
    names = args.scenario or list(LLAMACPP_TOUR if kind == "llamacpp" else TOUR)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or args.speed <= 0:
        problem = f"unknown scenario {unknown[0]!r} (see --list)" if unknown else "--speed > 0"
        print(f"rigctl demo: {problem}", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.list:
        print_list(args.speed, out)
        return EXIT_OK
    demo = Demo([SCENARIOS[n] for n in names], args.speed, not args.no_monitoring, out,
                engine_kind=kind)
    try:
        with _server_errors_logged_to(demo.directory / "servers.log"):
            asyncio.run(demo.main())
    except KeyboardInterrupt:  # before the demo heard signals itself: asyncio.run's
        demo.stopped_by = demo.stopped_by or "Ctrl-C"
    demo.say_line.raise_if_closed()  # its reader went away: the tour was cut short
    if demo.stopped_by is not None:
        raise Interrupted(f"rigctl demo: stopped by {demo.stopped_by}; everything it "
                          "started is gone")
    return EXIT_OK


@contextlib.contextmanager
def _server_errors_logged_to(path: Path) -> Iterator[None]:
    """The simulated engine and the webhook receiver serve in this process: a
    client that goes at the stop makes aiohttp log a traceback, which belongs
    in a file beside the other processes' logs, not in the story."""
    logger = logging.getLogger("aiohttp")
    handler = logging.FileHandler(path)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        handler.close()


def played_seconds(scenario: Scenario) -> float:
    """How much of a scenario the demo plays (rig seconds): a scenario with no
    alert to show is watched for HEALTHY_SECONDS only."""
    return scenario.seconds if scenario.expects else min(scenario.seconds, HEALTHY_SECONDS)


def print_list(speed: float, out: TextIO) -> None:
    print(f"{'SCENARIO':26} {'RIG TIME':>8} {f'AT x{speed:g}':>8}  SUMMARY", file=out)
    for scenario in SCENARIOS.values():
        name = scenario.name + (" *" if scenario.name in TOUR else "")
        seconds = played_seconds(scenario)
        print(f"{name:26} {duration(seconds):>8} {duration(seconds / speed):>8}  "
              f"{scenario.summary}", file=out)
    tour = sum(played_seconds(SCENARIOS[name]) for name in TOUR)
    print(f"* the default tour: {duration(tour)} of rig time, {duration(tour / speed)} at"
          f" x{speed:g}, plus the start-up and the wait for its last alerts to resolve",
          file=out)


def duration(seconds: float) -> str:
    """3m19s, 2m, 20s: whole seconds, as Prometheus writes durations."""
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (rest, "s")) if n)
    return text or "0s"


class Demo:
    def __init__(self, scenarios: list[Scenario], speed: float, monitoring: bool,
                 out: TextIO, engine_kind: str = "sglang") -> None:
        self.scenarios = scenarios
        self.speed = speed
        self.stall_scale = min(speed, MAX_STALL_SCALE)
        self.want_monitoring = monitoring
        # A closed pipe stops the tour, as a signal does.
        self.say_line = Say(out, on_closed=lambda: self._stop.set())
        self._stop = asyncio.Event()
        #: The signal that stopped the demo (Ctrl-C, SIGTERM), None if none did.
        self.stopped_by: str | None = None
        # What the tour started, for the stop to end.
        self.exporter: ExporterProcess | None = None
        self.monitoring: Monitoring | None = None
        self.receiver = WebhookReceiver(on_notification=self._notified)
        self.watcher: asyncio.Task[None] | None = None
        self.directory = Path(tempfile.mkdtemp(prefix="rigctl-demo-"))
        # Its clock starts now: the demo's clock is the rig's.
        self.rig = SimRig(self.speed, directory=self.directory / "rig", say=self.say,
                          stall_scale=self.stall_scale, engine_kind=engine_kind)
        self.alert_states: dict[tuple[tuple[str, str], ...], str] = {}
        # Alerts notified as firing and not yet as resolved.
        self.unresolved: set[frozenset[tuple[str, str]]] = set()
        # The label sets seen firing since the scenario playing now began; None
        # without Prometheus.
        self.fired: list[dict[str, str]] | None = None

    def say(self, line: str) -> None:
        """One line, after the rig's clock (h:mm:ss of its life so far)."""
        minutes, seconds = divmod(int(self.rig.clock.now()), 60)
        self.say_line(f"{minutes // 60}:{minutes % 60:02}:{seconds:02}  {line}")

    def _signalled(self, signum: signal.Signals) -> None:
        self.stopped_by = self.stopped_by or ("Ctrl-C" if signum == signal.SIGINT
                                              else signum.name)
        self._stop.set()

    async def main(self) -> None:
        """The tour until it ends or a signal or a closed pipe stops it; then the stop.

        The stop does not rely on the tour's cancellation reaching the end of the
        tour: whatever the tour awaits when it comes (a stream, a scenario's fault, a
        thread waiting for Prometheus), the tour gets TOUR_CANCEL_SECONDS to end, and
        the stop goes on without it. The processes stop together, on the loop, so the
        simulated engine keeps serving the exporter's tap while the exporter stops."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for signum in signals:
            loop.add_signal_handler(signum, self._signalled, signum)
        tour = asyncio.create_task(self._tour(), name="demo tour")
        stop = asyncio.create_task(self._stop.wait(), name="demo stop")
        try:
            await asyncio.wait([tour, stop], return_when=asyncio.FIRST_COMPLETED)
            if tour.done() and not tour.cancelled():
                tour.result()  # its failure, if it failed
        finally:
            stop.cancel()
            tour.cancel()
            await asyncio.wait([tour], timeout=TOUR_CANCEL_SECONDS)
            await self._stop_everything()
            for signum in signals:
                loop.remove_signal_handler(signum)

    async def _stop_everything(self) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
        if self.rig.agents is not None:
            self.rig.agents.hang_up()  # their streams through the tap end first
        processes: list[Process] = [*([self.exporter] if self.exporter else []),
                                    *(self.monitoring.processes if self.monitoring else [])]
        results = await asyncio.gather(stop_together(processes, CHILDREN_STOP_SECONDS),
                                       self.receiver.stop(), self.rig.stop(),
                                       return_exceptions=True)
        shutil.rmtree(self.directory, ignore_errors=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _tour(self) -> None:
        directory, rig = self.directory, self.rig
        await rig.start()
        # Started in this thread, waited for in another: the exporter dies with
        # the thread that started it (launch.Process).
        exporter = self.exporter = start_exporter(
            rig.exporter_args(compress_stall_window=True), directory / "rig", wait=False)
        await asyncio.to_thread(exporter.wait_ready)
        address = exporter.address
        processes: list[Process] = [exporter]
        monitoring = None
        if self.want_monitoring and _installed():
            await self.receiver.start()
            monitoring = self.monitoring = Monitoring(
                directory / "monitoring", self.speed, self.receiver.url,
                stall_scale=rig.stall_scale)
            # Started in this thread (its processes die with the thread that started
            # them), waited for in another, so that a signal meanwhile is heard.
            monitoring.launch()
            await asyncio.to_thread(monitoring.wait_ready)
            monitoring.write_targets([(DEMO_RIG, address)])
            processes += monitoring.processes
            self.watcher = asyncio.create_task(self._watch_alerts(monitoring))
            self.fired = []
        else:
            if self.want_monitoring:
                self.say("Prometheus or Alertmanager is not installed (./setup.sh installs"
                         " them): showing the exporter's readings instead of alerts")
            self.watcher = asyncio.create_task(self._watch_exporter(address))
        self._ready(address, monitoring, processes)
        started = time.time()
        await self._warm_up(monitoring)
        for scenario in self.scenarios:
            await self._play(scenario, rig)
        await self._settle()
        if monitoring is not None:
            await self._report(monitoring, started)
        self.say("tour done")

    async def _report(self, monitoring: Monitoring, started: float) -> None:
        """`rigctl report` of the tour's own span, from its Prometheus, with the rules
        time-scaled as Prometheus ran them (the wall clock's times and seconds)."""
        self.say(f"the report of the tour (rigctl report; wall-clock times, the rig ran"
                 f" {self.speed:g}x faster):")
        selection = matchers(rig=DEMO_RIG)
        evaluation = parse_duration(monitoring.intervals.evaluation)
        rules = alert_rules(selection, evaluation, monitoring.thresholds,
                            monitoring.time_scale, monitoring.stall_scale)
        prometheus = Prometheus(monitoring.prometheus_url, timeout=30.0)
        try:
            report = await asyncio.to_thread(build, prometheus, started, time.time(), rules,
                                             selection, evaluation)
        except Unreachable as exc:
            self.say(f"no report: {exc}")
            return
        text = io.StringIO()
        render(report, text)
        for line in text.getvalue().splitlines():
            self.say_line(line)

    async def _play(self, scenario: Scenario, rig: SimRig) -> None:
        """The scenario's timeline; the rig says each step, the watcher each alert."""
        expected = ", ".join(_name({"alertname": e.alert, **e.labels})
                             for e in scenario.expects)
        self.say(f"== {scenario.name}: expect {expected or 'no alert'}")
        if self.fired is not None:
            self.fired.clear()
        await play(rig, scenario, stop_at=played_seconds(scenario))
        # A stall outlasts its scenario (stalls compress less than the rest), and
        # so may its alert: the next scenario waits for it, within bounds.
        if self.fired is not None and scenario.expects:
            await self._wait_while(lambda: not all(self._fired(e) for e in scenario.expects),
                                   SETTLE_SECONDS)
        if not scenario.expects:
            active = ", ".join(_name(labels) for labels in self._paging())
            self.say(f"   {scenario.name}: " + (f"active: {active}" if active else
                                                "no alert that notifies anyone, as it should"))

    def _ready(self, address: str, monitoring: Monitoring | None,
               processes: list[Process]) -> None:
        self.say(f"exporter    http://{address}/metrics")
        if monitoring is not None:
            self.say(f"Prometheus  {monitoring.prometheus_url}/alerts"
                     f" (rules x{self.speed:g} faster)")
            self.say(f"Alertmanager {monitoring.alertmanager_url}")
        self.say(f"files in {self.directory}")
        pids = " ".join(str(p.popen.pid) for p in processes)
        self.say(f"running (pids {pids}); the rig lives {self.speed:g}x faster than real"
                 f" time, but decode stalls only {self.stall_scale:g}x (a 47 s stall lasts"
                 f" {47 / self.stall_scale:.1f} s, {47 * self.speed / self.stall_scale:.0f} s"
                 f" on the rig's clock); Ctrl-C stops")

    def _fired(self, expect: Expect) -> bool:
        return any(labels.get("alertname") == expect.alert and expect.labels.items()
                   <= labels.items() for labels in self.fired or ())

    def _paging(self) -> list[dict[str, str]]:
        """Active alerts that notify someone (info alerts go nowhere)."""
        return [dict(k) for k in self.alert_states if dict(k).get("severity") != "info"]

    async def _settle(self) -> None:
        """Wait for the alerts still active to resolve, and for Alertmanager to send
        their resolutions (at its next group_interval)."""
        if self._paging() or self.unresolved:
            self.say("waiting for the last alerts to resolve")
        await self._wait_while(self._paging, SETTLE_SECONDS)
        await self._wait_while(lambda: self.unresolved, NOTIFY_SECONDS)

    @staticmethod
    async def _wait_while(condition: Callable[[], object], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while condition() and time.monotonic() < deadline:
            await asyncio.sleep(WATCH_SECONDS)

    async def _warm_up(self, monitoring: Monitoring | None) -> None:
        """Let Prometheus scrape the rig healthy first: the exporter must have seen
        both cards before one can vanish, and rate windows need a start."""
        deadline = time.monotonic() + STARTUP_SECONDS
        while monitoring is not None and time.monotonic() < deadline:
            with contextlib.suppress(Unreachable):
                if await asyncio.to_thread(monitoring.query, 'up{job="rig"} == 1'):
                    break
            await asyncio.sleep(WATCH_SECONDS)
        await asyncio.sleep(max(2.0, WARMUP_SECONDS / self.speed))

    async def _watch_alerts(self, monitoring: Monitoring) -> None:
        """Print each alert's transitions as Prometheus evaluates them."""
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                alerts = await asyncio.to_thread(monitoring.alerts)
            except Unreachable:
                continue
            now = {}
            for alert in alerts:
                labels = alert["labels"]
                key = tuple(sorted(labels.items()))
                now[key] = alert["state"]
                if self.alert_states.get(key) != alert["state"]:
                    self.say(f"{alert['state'].upper():8} {_name(labels)}")
                    if alert["state"] == "firing" and self.fired is not None:
                        self.fired.append(labels)
            for key in self.alert_states.keys() - now.keys():
                self.say(f"RESOLVED {_name(dict(key))}")
            self.alert_states = now

    async def _watch_exporter(self, address: str) -> None:
        """Without Prometheus: a line of the exporter's key readings every few seconds."""
        while True:
            await asyncio.sleep(5 * WATCH_SECONDS)
            try:
                text = await read_text(f"http://{address}/metrics", 5)
            except Unreachable:
                continue
            self.say("readings: " + _readings(text, self.stall_scale))

    def _notified(self, notification: Notification) -> None:
        for alert in notification.payload["alerts"]:
            identity = frozenset(alert["labels"].items())
            if alert["status"] == "firing":
                self.unresolved.add(identity)
            else:
                self.unresolved.discard(identity)
            what = "page" if notification.path == "/page" else "notify"
            status = alert["status"].upper()
            self.say(f"-> {what} {status} {_name(alert['labels'])}:"
                     f" {alert['annotations'].get('description', '')}")


def _installed() -> bool:
    return all(shutil.which(t) for t in ("prometheus", "prometheus-alertmanager"))


def _name(labels: dict[str, str]) -> str:
    where = " ".join(f"{k}={labels[k]}" for k in ("engine", "card", "sensor", "signal")
                     if labels.get(k))
    return f"{labels.get('alertname', '?')} ({labels.get('severity', '?')}) {where}".rstrip()


def _readings(exposition: str, stall_scale: float) -> str:
    """The exporter's key readings, in the rig's time: a stall it measured lasted
    `stall_scale` times longer on the rig."""
    wanted: dict[str, Callable[[float], str]] = {
        "rig_engine_decode_stall_seconds": lambda v: f"stall {v * stall_scale:.1f} s",
        "rig_engine_queued_requests": lambda v: f"queued {v:.0f}",
        'rig_gpu_temperature_celsius{card="card1",sensor="junction"}':
            lambda v: f"card1 {v:.0f} °C",
        'rig_gpu_temperature_celsius{card="card2",sensor="junction"}':
            lambda v: f"card2 {v:.0f} °C",
        "rig_host_memory_available_bytes": lambda v: f"RAM available {v:.3g} B",
    }
    shown = []
    for line in exposition.splitlines():
        for prefix, show in wanted.items():
            head = line.rsplit(" ", 1)[0]
            if head == prefix or (head.startswith(prefix + "{") and "{" not in prefix):
                with contextlib.suppress(ValueError):
                    shown.append(show(float(line.rsplit(" ", 1)[1])))
    return ", ".join(shown) or json.dumps("no readings yet")

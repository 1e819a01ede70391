"""Prometheus and Alertmanager on loopback, for `rigctl demo` and the end-to-end
tests: each in its own temporary directory and process group, on a free port.

Prometheus' config has the layout of `deploy/prometheus.yml` (one job, its targets
from file_sd files) at 1 s intervals, pointed at the temporary rules, targets and
Alertmanager; the rules (`alerts/generate.py`) and `alerts/alertmanager.yml` are
time-scaled copies (`alerts/timescale.py`); Alertmanager's webhooks go to a
`WebhookReceiver`. Everything they read ships in the package.
"""

from __future__ import annotations

import shutil
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from alerts import ALERTMANAGER_CONFIG
from alerts.generate import render
from alerts.timescale import scaled_alertmanager, seconds
from exporter.process.launch import Process, free_port, wait_ready
from exporter.rigctl.client.http import get_json, items
from exporter.thresholds import Thresholds

# The scrape job of deploy/prometheus.yml.
JOB = "rig"


@dataclass(frozen=True)
class Intervals:
    """The rig's job's scrape interval and timeout, and the rules' evaluation
    interval: 1 s for the demo and the tests (their rules are time-scaled);
    deploy/prometheus.yml's (5 s) for a measurement at real time."""

    scrape: str = "1s"
    scrape_timeout: str = "1s"
    evaluation: str = "1s"

    @classmethod
    def of_job(cls, config: dict[str, Any]) -> Intervals:
        """The rig's job's intervals in a parsed prometheus.yml (deploy/'s, which sets
        the job's timeout): its own scrape interval where it sets one, else the global."""
        job = next(j for j in config["scrape_configs"] if j["job_name"] == JOB)
        return cls(scrape=job.get("scrape_interval", config["global"]["scrape_interval"]),
                   scrape_timeout=job["scrape_timeout"],
                   evaluation=config["global"]["evaluation_interval"])


def prometheus_config(rules: Path, alertmanager: str, targets_dir: Path,
                      remote_write_url: str | None = None,
                      intervals: Intervals = Intervals()) -> dict[str, Any]:
    """deploy/prometheus.yml's layout at `intervals`, for a temporary Prometheus."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": intervals.scrape,
                   "evaluation_interval": intervals.evaluation},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [{
            "job_name": JOB,
            "scrape_interval": intervals.scrape,
            "scrape_timeout": intervals.scrape_timeout,
            "file_sd_configs": [{"files": [str(targets_dir / "*.yml")],
                                 "refresh_interval": "1s"}],
        }],
    }
    if remote_write_url:
        config["remote_write"] = [{"url": remote_write_url,
                                   "queue_config": {"batch_send_deadline": "1s"}}]
    return config


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: run ./setup.sh (Debian packages)"
    return path


# --------------------------------------------------------------------- receiver
@dataclass(frozen=True)
class Notification:
    arrived: float  # time.monotonic()
    path: str  # /page or /notify: which receiver
    payload: dict[str, Any]

    @property
    def status(self) -> str:
        return self.payload["status"]


class WebhookReceiver:
    """Alertmanager's webhook target; keeps every notification with its arrival time."""

    def __init__(self, on_notification: Callable[[Notification], None] | None = None) -> None:
        self.notifications: list[Notification] = []
        self.on_notification = on_notification
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._receive)
        # Alertmanager holds no request open: the stop need not wait out aiohttp's
        # 60 s default for handlers in flight.
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        notification = Notification(time.monotonic(), request.path, await request.json())
        self.notifications.append(notification)
        if self.on_notification is not None:
            self.on_notification(notification)
        return web.Response()


# --------------------------------------------------------------------- Prometheus + AM
@dataclass
class Monitoring:
    """Prometheus and Alertmanager with the time-scaled rules and routing."""

    workdir: Path
    time_scale: float
    receiver_url: str
    # Stall lengths compress by this instead, if set (alerts/timescale.py).
    stall_scale: float | None = None
    # The table the rules are generated from.
    thresholds: Thresholds = field(default_factory=Thresholds)
    prometheus: Process | None = None
    alertmanager: Process | None = None
    prometheus_url: str = ""
    alertmanager_url: str = ""
    intervals: Intervals = field(default_factory=Intervals)

    @property
    def targets_dir(self) -> Path:
        return self.workdir / "targets"

    def write_targets(self, targets: Sequence[tuple[str, str]]) -> None:
        """One file_sd file per (rig name, exporter address), as deploy/targets/ shows."""
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        for rig, address in targets:
            (self.targets_dir / f"{rig}.yml").write_text(yaml.safe_dump(
                [{"targets": [address], "labels": {"rig": rig}}]))

    def start(self, remote_write_url: str | None = None) -> None:
        self.launch(remote_write_url)
        self.wait_ready()

    def launch(self, remote_write_url: str | None = None) -> None:
        """Start both without waiting for them: `wait_ready` waits, and may run in
        another thread, so that a Ctrl-C meanwhile is heard (rigctl demo)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.targets_dir.mkdir(exist_ok=True)
        self._start_alertmanager()
        self._start_prometheus(remote_write_url)

    def wait_ready(self) -> None:
        """Until both answer; NotReady (with the log) if one exits or never does."""
        assert self.alertmanager is not None and self.prometheus is not None, "launch() first"
        wait_ready(self.alertmanager_url + "/-/ready", self.alertmanager)
        wait_ready(self.prometheus_url + "/-/ready", self.prometheus)

    @property
    def processes(self) -> list[Process]:
        return [p for p in (self.prometheus, self.alertmanager) if p is not None]

    def _start_alertmanager(self) -> None:
        directory = self.workdir / "alertmanager"
        directory.mkdir()
        config = scaled_alertmanager(yaml.safe_load(ALERTMANAGER_CONFIG.read_text()),
                                     self.time_scale)
        for receiver in config["receivers"]:
            for hook in receiver.get("webhook_configs", []):
                hook["url"] = self.receiver_url + urllib.parse.urlsplit(hook["url"]).path
        config["templates"] = [str(ALERTMANAGER_CONFIG.parent / t) for t in config["templates"]]
        (directory / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        self.alertmanager_url = f"http://127.0.0.1:{port}"
        self.alertmanager = Process(
            "alertmanager",
            [tool("prometheus-alertmanager"), f"--config.file={directory / 'alertmanager.yml'}",
             f"--storage.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--cluster.listen-address=", "--log.level=debug"],
            directory / "alertmanager.log",
        )

    def _start_prometheus(self, remote_write_url: str | None) -> None:
        directory = self.workdir / "prometheus"
        directory.mkdir()
        rules = directory / "rig-rules.yaml"
        rules.write_text(render(self.thresholds, time_scale=self.time_scale,
                                stall_scale=self.stall_scale,
                                scrape_seconds=seconds(self.intervals.scrape)))
        am = urllib.parse.urlsplit(self.alertmanager_url).netloc
        config = prometheus_config(rules, am, self.targets_dir, remote_write_url,
                                   self.intervals)
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        self.prometheus_url = f"http://127.0.0.1:{port}"
        self.prometheus = Process(
            "prometheus",
            [tool("prometheus"), f"--config.file={directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            directory / "prometheus.log",
        )

    def stop(self) -> None:
        for process in (self.prometheus, self.alertmanager):
            if process is not None:
                process.stop()

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus' pending and firing alerts (its /api/v1/alerts)."""
        url = self.prometheus_url + "/api/v1/alerts"
        return items(url, get_json(url, 10), "data", "alerts")

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        return items(url, get_json(url, 10), "data", "result")

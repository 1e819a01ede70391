"""The end-to-end stack: simulated rigs, real exporters, real Prometheus and
Alertmanager, and a webhook receiver, all on loopback ports chosen at random.

- Every process runs in its own session (process group) and its own temporary
  directory, and `ExitStack`s stop them in reverse order, even when a test fails.
- The simulated SGLang servers and the webhook receiver share one asyncio loop in
  a background thread (`LoopThread`); tests change a rig's state through it.
- Prometheus' config is `deploy/prometheus.yml` with its file_sd directory, rule
  file and Alertmanager pointed at the temporary ones, and 1 s intervals; the
  rules and `alerts/alertmanager.yml` are time-scaled copies (`alerts/timescale.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from alerts.generate import render
from alerts.timescale import scaled_alertmanager
from exporter.sim.amdgpu_sysfs import RIG_CARDS, CardSpec, write_card, write_rig
from exporter.sim.procfs import HostSpec, write_proc
from exporter.sim.sglang_server import SimServer
from exporter.sim.sglang_state import SimEngine
from exporter.thresholds import Thresholds
from tests.scrape import free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ALERTMANAGER_CONFIG = REPO / "alerts" / "alertmanager.yml"
T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; `run` waits for a coroutine's result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="e2e-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def call(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()
        return self.run(call())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class Process:
    """A real process in its own session, logging to a file; `stop` ends its group."""

    def __init__(self, name: str, argv: list[str], log: Path, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log
        with open(log, "w") as out:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=cwd, env=env, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)


def wait_ready(url: str, process: Process, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            assert process.popen.poll() is None, f"{process.name} exited:\n{process.log()}"
            assert time.monotonic() < deadline, f"{process.name} not ready:\n{process.log()}"
            time.sleep(0.1)


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

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._receive)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        self.notifications.append(
            Notification(time.monotonic(), request.path, await request.json()))
        return web.Response()


# --------------------------------------------------------------------- the rig
def healthy_engine() -> SimEngine:
    """Two agents decoding, half the KV pool used, HiCache L2 at a third."""
    engine = SimEngine(token_usage=0.5, hicache_host_used_tokens=140_000,
                       hicache_host_total_tokens=423_593, evicted_tokens=0,
                       loaded_back_tokens=0, backed_up_tokens=0)
    engine.running = 2
    return engine


@dataclass
class SimRig:
    """One simulated rig: SGLang server, two-card sysfs tree, /proc files, exporter."""

    name: str
    workdir: Path
    time_scale: float
    engine: SimEngine = field(default_factory=healthy_engine)
    cards: dict[str, CardSpec] = field(default_factory=lambda: {c.card: c for c in RIG_CARDS})
    host: HostSpec = field(default_factory=HostSpec)
    server: SimServer | None = None
    exporter: Process | None = None
    exporter_address: str = ""

    @property
    def sysfs(self) -> Path:
        return self.workdir / "sys"

    @property
    def proc(self) -> Path:
        return self.workdir / "proc"

    async def start_engine(self) -> None:
        self.server = SimServer(self.engine)
        await self.server.start()

    def write_files(self) -> None:
        write_rig(self.sysfs, tuple(self.cards.values()))
        write_proc(self.proc, self.host)

    def set_card(self, card: str, **changes: Any) -> None:
        self.cards[card] = dataclasses.replace(self.cards[card], **changes)
        write_card(self.sysfs, self.cards[card])

    def set_host(self, **changes: Any) -> None:
        self.host = dataclasses.replace(self.host, **changes)
        write_proc(self.proc, self.host)

    def start_exporter(self) -> None:
        assert self.server is not None
        port = free_port()
        self.exporter_address = f"127.0.0.1:{port}"
        # The probe's schedule and deadline (60 s each by default) compress with
        # the rest of time.
        probe = 60 / self.time_scale
        engine = (f"main={self.server.url},kind=sglang,probe_interval_seconds={probe:g},"
                  f"probe_timeout_seconds={probe:g}")
        self.exporter = Process(
            f"exporter {self.name}",
            [sys.executable, "-m", "exporter", "--web.listen-address", self.exporter_address,
             "--sysfs.root", str(self.sysfs), "--gpu.backend", "sysfs",
             "--proc.root", str(self.proc), "--engine", engine],
            self.workdir / "exporter.log", cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


# --------------------------------------------------------------------- Prometheus + AM
@dataclass
class Monitoring:
    """Prometheus and Alertmanager with the time-scaled rules and routing."""

    workdir: Path
    time_scale: float
    receiver_url: str
    prometheus: Process | None = None
    alertmanager: Process | None = None
    prometheus_url: str = ""
    alertmanager_url: str = ""

    @property
    def targets_dir(self) -> Path:
        return self.workdir / "targets"

    def write_targets(self, rigs: list[SimRig]) -> None:
        """One file_sd file per rig, as deploy/targets/rigs.yml shows."""
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        for rig in rigs:
            (self.targets_dir / f"{rig.name}.yml").write_text(yaml.safe_dump(
                [{"targets": [rig.exporter_address], "labels": {"rig": rig.name}}]))

    def start(self, remote_write_url: str | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.targets_dir.mkdir(exist_ok=True)
        self._start_alertmanager()
        self._start_prometheus(remote_write_url)

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
        wait_ready(self.alertmanager_url + "/-/ready", self.alertmanager)

    def _start_prometheus(self, remote_write_url: str | None) -> None:
        directory = self.workdir / "prometheus"
        directory.mkdir()
        rules = directory / "rig-rules.yaml"
        rules.write_text(render(Thresholds(), time_scale=self.time_scale))
        config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(rules)]
        am = urllib.parse.urlsplit(self.alertmanager_url).netloc
        config["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [am]}]
        job = config["scrape_configs"][0]
        job["scrape_timeout"] = "1s"
        job["file_sd_configs"] = [{"files": [str(self.targets_dir / "*.yml")],
                                   "refresh_interval": "1s"}]
        if remote_write_url:
            config["remote_write"] = [{"url": remote_write_url,
                                       "queue_config": {"batch_send_deadline": "1s"}}]
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
        wait_ready(self.prometheus_url + "/-/ready", self.prometheus)

    def stop(self) -> None:
        for process in (self.prometheus, self.alertmanager):
            if process is not None:
                process.stop()

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]["result"]

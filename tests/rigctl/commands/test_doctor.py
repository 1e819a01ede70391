"""Acceptance: `rigctl doctor` as a process, against a real exporter process that
reads the simulated rig (exporter/sim: SGLang server, two 7900 XTX cards in a sysfs
tree, the host's /proc), a real Prometheus and Alertmanager (exporter/rigctl/stack.py),
and for Grafana, which cannot run here, a stand-in: a small aiohttp server answering
/api/search and /api/datasources as Grafana's HTTP API documents them.

The simulated rig runs in this test's event loop, so the doctor runs as an asyncio
subprocess while the rig answers; the cards' energy accumulators count their power
from a task here, with a chosen factor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from dashboards.panels import UIDS
from exporter.daemon.sources.energy_counter import JOULES_PER_COUNT
from exporter.process.launch import free_port, start_exporter
from exporter.rigctl.stack import Monitoring
from exporter.sim.rig.simrig import SimRig
from exporter.sim.rig.sysfs_writer import gpu_metrics_v1_3
from exporter.thresholds import Thresholds
from tests.rigctl.commands.conftest import ENV, REPO, bash
from tests.support.loopback_server import serving
from tests.support.rig_config import write_rig_config
from tests.support.sglang_release import ReleasePlayback, ReleaseServer

pytestmark = pytest.mark.long_running(70)

WATCH = ("--watch-seconds", "5")
TOKEN = "glsa_test_token"


@dataclass(frozen=True)
class Verdict:
    code: int
    out: str
    err: str

    @property
    def report(self) -> dict:
        return json.loads(self.out)

    def check(self, name: str, subject: str = "rig") -> dict:
        found = [c for c in self.report["checks"]
                 if c["name"] == name and c["subject"] == subject]
        assert len(found) == 1, (name, subject, self.out)
        return found[0]

    def statuses(self) -> dict[tuple[str, str], str]:
        return {(c["name"], c["subject"]): c["status"] for c in self.report["checks"]}


async def doctor(*args: str) -> Verdict:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter.rigctl", "doctor", *WATCH, *args, cwd=REPO, env=ENV,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return Verdict(process.returncode, out.decode(), err.decode())


# --------------------------------------------------------------------- the rig
@dataclass
class Rig:
    sim: SimRig
    exporter: str
    address: str
    config: Path


@contextlib.contextmanager
def power_counted(sim: SimRig, factors: dict[str, float]) -> Iterator[None]:
    """Each card's gpu_metrics energy accumulator counts its power at 2^-16 J a
    count, times `factor`, with its system clock moving in real time. A thread of
    its own rewrites the blob every 50 ms, so the test's busy event loop (the
    simulated engine renders there) cannot hold the counter back."""
    stop = threading.Event()
    started = time.monotonic()
    cards = {card: (sim.cards[card], (sim.sysfs_root / "class" / "drm" / card / "device")
                    .resolve()) for card in factors}

    def count() -> None:
        while not stop.wait(0.05):
            elapsed = time.monotonic() - started
            for card, (spec, device) in cards.items():
                joules = spec.power_average_uw / 1e6 * elapsed * factors[card]
                blob = gpu_metrics_v1_3(dataclasses.replace(
                    spec, energy_accumulator=int(joules / JOULES_PER_COUNT) % 2**32 + 1,
                    system_clock_ns=spec.system_clock_ns + int(elapsed * 1e9)))
                staged = device / "gpu_metrics.new"
                staged.write_bytes(blob)
                os.replace(staged, device / "gpu_metrics")  # never read half-written

    thread = threading.Thread(target=count, name="energy accumulators", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@asynccontextmanager
async def exporter_for(config: Path, port: int, log_dir: Path) -> AsyncIterator[str]:
    # Started in this thread, waited for in another: it dies with the thread that
    # started it (exporter.process.launch.Process).
    process = start_exporter(["--config.file", str(config)], log_dir,
                             address=f"127.0.0.1:{port}", wait=False)
    try:
        await asyncio.to_thread(process.wait_ready)
        yield process.url
    finally:
        await asyncio.to_thread(process.stop)


@asynccontextmanager
async def sim_rig(tmp_path: Path, engine: str = "",
                  energy: dict[str, float] | None = None,
                  engine_kind: str = "sglang") -> AsyncIterator[Rig]:
    sim = await SimRig(directory=tmp_path / "sim", engine_kind=engine_kind).start()
    port = free_port()
    config = write_rig_config(tmp_path / "rig.toml", port, sim.engine_url, engine,
                              sim.sysfs_root, sim.proc_root)
    try:
        with power_counted(sim, energy or {"card1": 1.0, "card2": 1.0}):
            async with exporter_for(config, port, tmp_path) as url:
                yield Rig(sim, url, f"127.0.0.1:{port}", config)
    finally:
        await sim.stop()


@asynccontextmanager
async def prometheus(workdir: Path, target: str,
                     thresholds: Thresholds | None = None) -> AsyncIterator[Monitoring]:
    """A real Prometheus and Alertmanager (unscaled rules from `thresholds`) that
    scrape `target` with a rig label, once Prometheus has scraped it."""
    monitoring = Monitoring(workdir, 1.0, "http://127.0.0.1:9",
                            thresholds=thresholds or Thresholds())
    workdir.mkdir(parents=True)
    monitoring.write_targets([("rig-test", target)])
    await asyncio.to_thread(monitoring.start)
    try:
        await asyncio.to_thread(_until_scraped, monitoring.prometheus_url)
        yield monitoring
    finally:
        await asyncio.to_thread(monitoring.stop)


def _until_scraped(prometheus_url: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with urllib.request.urlopen(prometheus_url + "/api/v1/targets", timeout=5) as answer:
            targets = json.load(answer)["data"]["activeTargets"]
        if targets and all(t["health"] == "up" for t in targets):
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus did not scrape the exporter: {targets}")


@asynccontextmanager
async def grafana(prometheus_url: str, dashboards: list[str],
                  time_interval: str | None) -> AsyncIterator[str]:
    """Grafana's /api/search and /api/datasources, as its HTTP API documents them,
    behind a service account token."""

    def authorised(request: web.Request) -> None:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise web.HTTPUnauthorized(text='{"message":"Unauthorized"}')

    async def search(request: web.Request) -> web.Response:
        authorised(request)
        assert request.query.get("type") == "dash-db"
        return web.json_response([
            {"id": i, "uid": uid, "title": f"Rig: {uid}", "uri": f"db/{uid}",
             "url": f"/d/{uid}/{uid}", "slug": "", "type": "dash-db", "tags": ["rig"],
             "isStarred": False, "sortMeta": 0} for i, uid in enumerate(dashboards, 1)])

    async def datasources(request: web.Request) -> web.Response:
        authorised(request)
        json_data = {"httpMethod": "POST"} | (
            {"timeInterval": time_interval} if time_interval else {})
        return web.json_response([
            {"id": 1, "uid": "loki", "orgId": 1, "name": "Loki", "type": "loki",
             "access": "proxy", "url": "http://127.0.0.1:3100", "basicAuth": False,
             "isDefault": False, "jsonData": {}, "readOnly": False},
            {"id": 2, "uid": "rig-prometheus", "orgId": 1, "name": "Prometheus (rig)",
             "type": "prometheus", "typeName": "Prometheus", "access": "proxy",
             "url": prometheus_url, "user": "", "database": "", "basicAuth": False,
             "isDefault": True, "jsonData": json_data, "readOnly": True}])

    app = web.Application()
    app.router.add_get("/api/search", search)
    app.router.add_get("/api/datasources", datasources)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def token_file(tmp_path: Path) -> str:
    path = tmp_path / "grafana-token"
    path.write_text(TOKEN + "\n")
    return str(path)


# --------------------------------------------------------------------- the tests
def test_a_sound_rig_fails_no_check(tmp_path: Path) -> None:
    tap = free_port()

    async def scenario() -> None:
        async with sim_rig(tmp_path, engine=f'tap_listen_address = "127.0.0.1:{tap}"') as rig, \
                prometheus(tmp_path / "monitoring", rig.address) as monitoring, \
                grafana(monitoring.prometheus_url, list(UIDS.values()), "1s") as url:
            verdict = await doctor(
                "--exporter", rig.exporter, "--config.file", str(rig.config), "--probe",
                "--prometheus", monitoring.prometheus_url,
                "--alertmanager", monitoring.alertmanager_url, "--grafana", url,
                "--grafana-token-file", token_file(tmp_path), "--json")
        assert verdict.code == 0, verdict.out + verdict.err
        statuses = verdict.statuses()
        assert set(statuses.values()) <= {"ok", "skip"}, verdict.out
        expected_ok = [
            ("engines", "rig"), ("engine_version", "main"), ("stall_plan", "main"),
            ("decode_progress", "main"), ("tap_bypass", "main"), ("gpu_cards", "rig"),
            *((name, card) for card in ("card1", "card2") for name in (
                "gpu_metrics", "gpu_dpm_tables", "gpu_energy", "gpu_temperature_limits")),
            ("host_psi", "rig"), ("host_swap", "rig"), ("prometheus_target", "rig"),
            ("prometheus_scrape_interval", "rig"), ("prometheus_rules", "rig"),
            ("prometheus_alertmanager", "rig"), ("grafana_dashboards", "rig"),
            ("grafana_time_interval", "rig")]
        assert {k: statuses.get(k) for k in expected_ok} == dict.fromkeys(expected_ok, "ok")
        assert "the doctor's probe got 32 tokens" in verdict.check("decode_progress",
                                                                  "main")["detail"]
        assert "2^-16 J unit holds on gpu_metrics v1.3" in verdict.check("gpu_energy",
                                                                         "card2")["detail"]
        assert "rig rig-test" in verdict.check("prometheus_target")["detail"]
        assert TOKEN not in verdict.out + verdict.err

    asyncio.run(scenario())


def test_a_llamacpp_rig_fails_no_check_and_names_its_stall_plan(tmp_path: Path) -> None:
    """kind = "llamacpp" on the simulated llama-server: its info from /props, the stall
    tracker's plan from /slots, and metrics_dir (SGLang's) skipped."""

    async def scenario() -> Verdict:
        async with sim_rig(tmp_path, engine='kind = "llamacpp"', engine_kind="llamacpp") as rig:
            # The tracker reports its plan once it has polled.
            await asyncio.sleep(1.0)
            return await doctor("--exporter", rig.exporter, "--config.file", str(rig.config),
                                "--json")

    verdict = asyncio.run(scenario())
    statuses = verdict.statuses()
    assert "fail" not in statuses.values(), verdict.out
    assert verdict.check("engine_version", "main")["detail"].startswith(
        "main: llamacpp b1-sim"), verdict.out
    plan = verdict.check("stall_plan", "main")
    assert plan["status"] == "ok" and "plan llamacpp_slots" in plan["detail"], plan
    assert verdict.check("metrics_dir", "main")["status"] == "skip"


def test_metrics_dir_naming_an_empty_directory_fails_with_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "prometheus-multiproc"
    empty.mkdir()

    async def scenario() -> Verdict:
        async with sim_rig(tmp_path, engine=f'metrics_dir = "{empty}"') as rig:
            return await doctor("--exporter", rig.exporter, "--config.file", str(rig.config))

    verdict = asyncio.run(scenario())
    assert verdict.code == 2, verdict.out + verdict.err
    lines = verdict.out.splitlines()
    assert lines[0].startswith("rig doctor FAIL: 1 fail"), verdict.out
    at = next(i for i, line in enumerate(lines) if line.startswith("FAIL    metrics_dir"))
    assert f"{empty} holds no prometheus_client file" in lines[at]
    assert lines[at + 1].strip().startswith("fix: set metrics_dir to the "
                                            "PROMETHEUS_MULTIPROC_DIR"), verdict.out


def test_rules_from_another_threshold_table_warn_naming_the_rules(tmp_path: Path) -> None:
    other = dataclasses.replace(Thresholds(), decode_stall_critical_seconds=20.0,
                                gpu_hot_for_seconds=300)

    async def scenario() -> Verdict:
        async with sim_rig(tmp_path) as rig, \
                prometheus(tmp_path / "monitoring", rig.address, other) as monitoring, \
                grafana(monitoring.prometheus_url,
                        [uid for uid in UIDS.values() if uid != UIDS["host"]], None) as url:
            return await doctor("--exporter", rig.exporter, "--config.file", str(rig.config),
                                "--prometheus", monitoring.prometheus_url, "--grafana", url,
                                "--grafana-token-file", token_file(tmp_path), "--json")

    verdict = asyncio.run(scenario())
    rules = verdict.check("prometheus_rules")
    assert rules["status"] == "warn", rules
    named = rules["detail"].split(": ", 1)[1]
    assert "RigDecodeStarvation (expression, annotations)" in named
    assert "RigGpuHot (for 300 s, 120 s generated, annotations)" in named
    assert "RigHostSwapping" not in named and "RigGpuMissing" not in named
    assert "--config " + str(tmp_path / "rig.toml") in rules["fix"]
    # The stand-in Grafana lacks the host dashboard and assumes 15 s for a 1 s scrape.
    dashboards = verdict.check("grafana_dashboards")
    assert dashboards["status"] == "fail" and dashboards["detail"].endswith(": rig-host")
    interval = verdict.check("grafana_time_interval")
    assert interval["status"] == "warn" and "'Prometheus (rig)' 15s" in interval["detail"]
    assert interval["fix"].startswith("set jsonData.timeInterval: 1s")
    assert verdict.code == 2


def test_an_energy_counter_off_from_the_power_and_traffic_around_the_tap_warn(
        tmp_path: Path) -> None:
    tap = free_port()

    async def around_the_tap(engine_url: str) -> None:
        """An agent that talks to the engine itself, a stream every second."""
        body = {"text": "hello", "sampling_params": {"max_new_tokens": 8}, "stream": True}
        async with aiohttp.ClientSession() as session:
            while True:
                async with session.post(engine_url + "/generate", json=body) as response:
                    await response.read()
                await asyncio.sleep(1.0)

    async def scenario() -> Verdict:
        async with sim_rig(tmp_path, engine=f'tap_listen_address = "127.0.0.1:{tap}"',
                           energy={"card1": 1.0, "card2": 4.0}) as rig:
            agent = asyncio.create_task(around_the_tap(rig.sim.engine_url))
            try:
                return await doctor("--exporter", rig.exporter, "--config.file",
                                    str(rig.config), "--json")
            finally:
                agent.cancel()

    verdict = asyncio.run(scenario())
    assert verdict.code == 1, verdict.out + verdict.err
    energy = verdict.check("gpu_energy", "card2")
    assert energy["status"] == "warn", energy
    assert energy["detail"].startswith("card2: ")
    factor = float(re.search(r"\(x([\d.]+)\)", energy["detail"]).group(1))
    assert 3.5 < factor < 4.5, energy
    assert "card2" in energy["fix"]
    assert verdict.check("gpu_energy", "card1")["status"] == "ok"
    bypass = verdict.check("tap_bypass", "main")
    assert bypass["status"] == "warn" and "the tap saw 0" in bypass["detail"], bypass
    assert f"127.0.0.1:{tap}" in bypass["fix"]
    assert {s for s in verdict.statuses().values()} <= {"ok", "skip", "warn"}


@contextlib.contextmanager
def live_pids(count: int) -> Iterator[list[int]]:
    """Processes that stay alive, for files that must be written by running pids."""
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(count)]
    try:
        yield [p.pid for p in sleepers]
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_metrics_dir_is_judged_against_the_engine_that_serves_it(tmp_path: Path) -> None:
    """Real prometheus_client files written as running pids, and /metrics rendered from
    them as SGLang does: they agree; another engine's files do not."""

    async def scenario() -> tuple[Verdict, Verdict, int, list[int]]:
        with live_pids(4) as pids:
            roles = dict(zip(("tokenizer", "tp0", "tp1", "detokenizer"), pids, strict=True))
            playback = ReleasePlayback("0.5.23", pids=roles)
            other = ReleasePlayback("0.5.23", pids=roles)  # another engine's directory
            playback.start_requests(streaming=2)
            other.start_requests(streaming=1)
            server = ReleaseServer(playback)
            await server.start()

            async def engines_run() -> None:
                while True:
                    playback.sync()
                    other.sync()
                    await asyncio.sleep(0.05)

            running = asyncio.create_task(engines_run())
            port = free_port()
            own = write_rig_config(tmp_path / "rig.toml", port, server.url,
                                   f'metrics_dir = "{playback.directory}"')
            wrong = write_rig_config(tmp_path / "wrong.toml", port, server.url,
                                     f'metrics_dir = "{other.directory}"')
            try:
                async with exporter_for(own, port, tmp_path) as url:
                    before = server.renders
                    agree = await doctor("--exporter", url, "--config.file", str(own), "--json")
                    renders = server.renders - before
                    differ = await doctor("--exporter", url, "--config.file", str(wrong),
                                          "--json")
            finally:
                running.cancel()
                await server.stop()
                playback.close()
                other.close()
        return agree, differ, renders, pids

    agree, differ, renders, pids = asyncio.run(scenario())
    check = agree.check("metrics_dir", "main")
    assert check["status"] == "ok", check
    # The detokenizer writes none of the counters the tracker reads.
    tokenizer, tp0, tp1, _ = pids
    assert f"files of pids {tokenizer}, {tp0}, {tp1} (3 running)" in check["detail"], check
    assert "they agree with" in check["detail"]
    assert agree.code == 0, agree.out
    # Three scrapes of the exporter and one read to compare: the tracker reads files.
    assert renders <= 4, renders
    wrong_check = differ.check("metrics_dir", "main")
    assert wrong_check["status"] == "fail", wrong_check
    assert "not the files this engine serves" in wrong_check["detail"]
    assert differ.code == 2


def test_no_exporter_exits_3_in_one_line() -> None:
    port = free_port()
    ended = bash(f"{sys.executable} -m exporter.rigctl doctor --exporter "
                 f"http://127.0.0.1:{port}")
    assert ended.status == 3, ended
    assert ended.out == ""
    assert ended.err_lines == [f"rigctl doctor: cannot reach the exporter: "
                               f"http://127.0.0.1:{port}/metrics: [Errno 111] Connection refused"]


def test_bad_arguments_exit_3_in_one_line() -> None:
    for args, says in (("--probe", "--probe needs --config.file"),
                       ("--watch-seconds 2", "--watch-seconds must be 5 or more"),
                       ("--config.file /nonexistent.toml", "config key config.file")):
        ended = bash(f"{sys.executable} -m exporter.rigctl doctor {args}")
        assert ended.status == 3, (args, ended)
        assert len(ended.err_lines) == 1 and says in ended.err, (args, ended)


@contextlib.contextmanager
def answering(answers: dict[str, tuple[str, bytes]]) -> Iterator[str]:
    """A loopback server answering each path with (content type, body); 404 else."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            kind, body = answers.get(self.path.split("?")[0], ("text/plain", b""))
            self.send_response(200 if self.path.split("?")[0] in answers else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield url


EXPOSITION = ("text/plain", b"# TYPE rig_source_up gauge\nrig_source_up{source=\"host\"} 1\n")


def test_answers_it_cannot_read_are_one_line_each() -> None:
    """Not a rig exporter: exit 3 in one line. A Prometheus answering the wrong shape:
    its checks fail naming the URL and the field, the others run."""
    with answering({"/metrics": ("text/html", b"<html>router login</html>")}) as url:
        ended = bash(f"{sys.executable} -m exporter.rigctl doctor --exporter {url}")
    assert ended.status == 3 and ended.out == "", ended
    assert ended.err_lines == [f"rigctl doctor: cannot reach the exporter: {url}/metrics: "
                               "not a Prometheus exposition: '<html>router login</html>'"]

    wrong = {"/metrics": EXPOSITION,
             "/api/v1/targets": ("application/json", b'{"status":"success","data":[]}'),
             "/api/v1/rules": ("application/json", b'{"data":{"groups":{"a":1}}}'),
             "/api/v1/alertmanagers": ("application/json", b"null")}
    with answering(wrong) as url:
        ended = bash(f"{sys.executable} -m exporter.rigctl doctor {' '.join(WATCH)} "
                     f"--exporter {url} --prometheus {url} --json")
    assert ended.status == 2, ended
    assert "Traceback" not in ended.err and ended.err == ""
    checks = {c["name"]: c for c in json.loads(ended.out)["checks"]}
    assert checks["prometheus_target"]["status"] == "fail"
    assert f"{url}/api/v1/targets?state=active: data is a list, not an object" in \
        checks["prometheus_target"]["detail"]
    assert "data.groups is not a list of objects" in checks["prometheus_rules"]["detail"]
    assert "the answer is null, not an object" in checks["prometheus_alertmanager"]["detail"]
    assert checks["host_psi"]["status"] == "warn"  # the exporter's own checks still ran

"""`rigctl health --prometheus`: the Rig* alerts firing in a real Prometheus, and
which of them a real Alertmanager silences, beside the exporter's own checks.

Stack on loopback: the simulated rig and a real exporter process
(tests/rigctl/commands/test_health_live.py), Prometheus 2.42 scraping it every second with
rules rendered from the same thresholds (holds cut to a second), and
Alertmanager 0.25 with a silence on RigGpuHot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from alerts.generate import render
from exporter.process.launch import free_port
from exporter.rigctl.commands.health import exit_code
from exporter.sim.rig.sysfs_writer import RIG_CARDS
from exporter.thresholds import Thresholds
from tests.support.live_rig import live_rig
from tests.support.rig_readings import validate

# card2 at 107 °C with its clock held at 72 % under load: RigGpuThermalDownclock
# (critical once held a second here) and RigGpuHot (warning) fire.
HOT = dataclasses.replace(RIG_CARDS[1], junction_mc=107000, sclk_hz=1650000000,
                          busy_percent=100)
FAST = Thresholds(gpu_downclock_for_seconds=1, gpu_downclock_critical_for_seconds=1,
                  gpu_hot_for_seconds=1, gpu_power_capped_for_seconds=1)


def start(command: list[str], url: str) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"{command[0]} did not start") from None
            time.sleep(0.2)


def silence(alertmanager: str, alertname: str) -> None:
    now = datetime.now(UTC)
    body = json.dumps({
        "matchers": [{"name": "alertname", "value": alertname, "isRegex": False}],
        "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "test", "comment": "known: the fans are on order",
    }).encode()
    request = urllib.request.Request(alertmanager + "/api/v2/silences", data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).read()


def test_firing_alerts_with_silences_marked(tmp_path: Path) -> None:
    prometheus_bin = shutil.which("prometheus")
    alertmanager_bin = shutil.which("prometheus-alertmanager")
    assert prometheus_bin and alertmanager_bin, "apt-get install prometheus prometheus-alertmanager"

    async def scenario() -> None:
        async with live_rig(tmp_path, cards=(RIG_CARDS[0], HOT)) as rig:
            am_port, prom_port = free_port(), free_port()
            am_url, prom_url = f"http://127.0.0.1:{am_port}", f"http://127.0.0.1:{prom_port}"
            (tmp_path / "am.yml").write_text(
                "route: {receiver: none, group_wait: 0s}\nreceivers: [{name: none}]\n")
            (tmp_path / "rules.yaml").write_text(render(FAST))
            (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{tmp_path / 'rules.yaml'}]
alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}
scrape_configs:
- job_name: rig
  static_configs: [{{targets: ['{rig.url.removeprefix("http://")}']}}]
""")
            processes = []
            try:
                processes.append(start([
                    alertmanager_bin, f"--config.file={tmp_path / 'am.yml'}",
                    f"--storage.path={tmp_path / 'am'}",
                    f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                    am_url + "/-/ready"))
                silence(am_url, "RigGpuHot")
                processes.append(start([
                    prometheus_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}"], prom_url + "/-/ready"))
                await check(rig, prom_url, am_url)
            finally:
                for process in processes:
                    process.terminate()
                    process.wait(timeout=10)

    asyncio.run(scenario())


async def check(rig, prom_url: str, am_url: str) -> None:
    deadline = time.monotonic() + 90
    while True:
        # No --alertmanager: rigctl asks Prometheus which Alertmanager it sends to.
        code, out, err = await rig.rigctl("--prometheus", prom_url, "--json")
        report = json.loads(out)
        alerts = {a["name"]: a for a in report.get("alerts", [])}
        if ({"RigGpuHot", "RigGpuThermalDownclock"} <= set(alerts)
                and alerts["RigGpuHot"]["silenced"]) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    validate(report)
    assert alerts["RigGpuHot"]["silenced"] is True, (out, err)
    assert {a["silenced"] for n, a in alerts.items() if n != "RigGpuHot"} == {False}
    assert alerts["RigGpuHot"]["labels"]["card"] == "card2"
    assert code == 2
    code, out, err = await rig.rigctl("--prometheus", prom_url, "--alertmanager", am_url)
    lines = out.splitlines()
    alert_lines = lines[next(i for i, x in enumerate(lines) if x.startswith("Prometheus:")):]
    hot = next(x for x in alert_lines if "RigGpuHot" in x)
    assert hot.startswith("WARNING") and "card2" in hot and hot.endswith("[silenced]")
    assert any(x.startswith("CRITICAL") and "RigGpuThermalDownclock" in x for x in alert_lines)
    assert "Rig* alert(s) firing" in out and code == 2


def test_exit_status_counts_alerts_unless_silenced() -> None:
    def report(*alerts: tuple[str, bool | None]) -> dict:
        return {"status": "ok", "checks": [], "alerts": [
            {"name": "RigX", "severity": severity, "state": "firing", "silenced": silenced,
             "summary": "", "labels": {}} for severity, silenced in alerts]}

    assert exit_code(report(("critical", False))) == 2
    assert exit_code(report(("critical", True), ("warning", None))) == 1
    assert exit_code(report(("critical", True), ("info", False))) == 0

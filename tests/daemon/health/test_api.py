"""/api/health over real HTTP: the schema, the cost (no reads beyond a scrape's),
and the threshold table reaching the rule and the check together."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from alerts.generate import main as alerts_main
from alerts.generate import render
from alerts.rules.common import dur
from dashboards.generate import main as dashboards_main
from exporter.config import load_config, read_config_file
from exporter.daemon.health.report import HealthStatus
from exporter.daemon.runtime import Exporter
from exporter.daemon.sources.host import HostReading
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from exporter.thresholds import Thresholds, thresholds_from_config
from tests.scrape import get, serving
from tests.support.rig_readings import Rig, Watch, card, one, validate
from tests.support.sysfs_tree import SYSFS_FIXTURE


class CountingHost:
    """A host source that takes 0.2 s and counts its reads."""

    name = "host"

    def __init__(self) -> None:
        self.reads = 0

    async def read(self) -> HostReading:
        self.reads += 1
        await asyncio.sleep(0.2)
        return HostReading(64e9, 19e9, 8e9, 62e6, 0.0, 0.0)


def config(**health: float):
    return load_config({"health": {"sample_interval_seconds": 0, **health}})


def test_api_health_validates_against_the_schema(tmp_path: Path) -> None:
    write_proc(tmp_path / "proc", HostSpec())
    exporter = Exporter(load_config({
        "gpu": {"backend": "sysfs", "sysfs_root": str(SYSFS_FIXTURE)},
        "host": {"proc_root": str(tmp_path / "proc")},
        "health": {"sample_interval_seconds": 0},
    }))

    async def scenario() -> tuple[int, str, str]:
        async with serving(exporter) as url:
            return await get(url + "/api/health")

    status, content_type, body = asyncio.run(scenario())
    assert status == 200 and content_type.startswith("application/json")
    report = json.loads(body)
    validate(report)
    names = {c["name"] for c in report["checks"]}
    assert {"gpu_present", "gpu_thermal_downclock", "gpu_hot", "host_memory",
            "host_swap", "exporter_source"} <= names
    assert report["status"] in ("ok", "warn", "crit", "unknown")


def test_concurrent_scrape_and_health_request_share_one_read() -> None:
    source = CountingHost()
    exporter = Exporter(config(), sources=[source])

    async def scenario() -> list:
        async with serving(exporter) as url:
            return await asyncio.gather(get(url + "/metrics"), get(url + "/api/health"))

    metrics, health = asyncio.run(scenario())
    assert metrics[0] == 200 and health[0] == 200
    assert source.reads == 1
    assert "rig_host_memory_total_bytes" in metrics[2]


def test_the_sampler_reads_only_when_no_scrape_came() -> None:
    source = CountingHost()
    exporter = Exporter(config(sample_interval_seconds=0.5), sources=[source])

    async def scenario() -> None:
        async with serving(exporter):
            await asyncio.sleep(1.9)

    asyncio.run(scenario())
    # One read per 0.5 s idle interval, each taking 0.2 s: 2 or 3 in 1.9 s, not 4 Hz.
    assert 2 <= source.reads <= 4
    assert exporter.health.history.watched(exporter.health.last_observed or 0) > 0


def test_one_threshold_moves_the_rule_the_health_check_and_the_dashboard_line(
        tmp_path: Path) -> None:
    rig_toml = tmp_path / "rig.toml"
    rig_toml.write_text("[thresholds]\ngpu_hot_margin_celsius = 15\n")
    thresholds = thresholds_from_config(rig_toml)
    assert thresholds == Thresholds(gpu_hot_margin_celsius=15)
    # The rule, rendered from the file ...
    assert alerts_main(["--config", str(rig_toml), "--out", str(tmp_path / "rules.yaml")]) == 0
    rules = (tmp_path / "rules.yaml").read_text()
    # RigGpuHot holds for minutes, so it reads the series' last sample over a lost
    # scrape (alerts/rules/lost_scrape.py).
    headroom = ("last_over_time(card_sensor:rig_gpu_temperature_headroom:celsius"
                f"[{dur(Thresholds().lost_scrape_bridge_seconds)}])")
    assert f"{headroom} <= 15\n" in rules
    assert f"{headroom} <= 10\n" in render(Thresholds())
    # ... the dashboard's hot line, rendered from the file ...
    assert dashboards_main(["--config", str(rig_toml), "--out", str(tmp_path / "dash")]) == 0
    gpus = (tmp_path / "dash" / "gpus.json").read_text()
    assert 'limit=\\"critical\\"} - 15"' in gpus and 'limit=\\"critical\\"} - 10"' not in gpus
    # ... and the health check, judged with the table the exporter reads from the file:
    # junction 97 °C of 110 °C is hot with a 15 °C margin only.
    exporter_thresholds = load_config(read_config_file(rig_toml)).thresholds
    assert exporter_thresholds == thresholds
    rig = Rig(cards=[card(temperatures_celsius={"edge": 70.0, "junction": 97.0,
                                                "memory": 80.0})])
    moved = one(Watch(exporter_thresholds).at(0, rig), "gpu_hot", card="card1")
    default = one(Watch().at(0, rig), "gpu_hot", card="card1")
    assert (moved.status, moved.threshold) == (HealthStatus.WARN, 95)
    assert (default.status, default.threshold) == (HealthStatus.OK, 100)

"""deploy/: the systemd unit (hardening, systemd-analyze verify), the Prometheus
config for many rigs (promtool check config), and the demo's Prometheus of its layout."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alerts.timescale import seconds
from exporter.config import WebConfig
from exporter.process.open_files import RESERVED_FOR_SOURCES
from exporter.rigctl.stack import Intervals, prometheus_config
from exporter.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "rig-exporter.service"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's unit syntax: [Section], Key=value, a key may repeat; # and ; comment."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"key outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not Key=value: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_unit_runs_as_a_dedicated_unprivileged_user() -> None:
    service = parse_unit(UNIT.read_text())["Service"]
    assert service["User"] == ["rig-exporter"] and service["Group"] == ["rig-exporter"]
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["CapabilityBoundingSet"] == [""]
    assert service["Restart"] == ["on-failure"]


def test_unit_sees_the_system_read_only() -> None:
    service = parse_unit(UNIT.read_text())["Service"]
    assert service["ProtectSystem"] == ["strict"]
    assert service["ProtectHome"] == ["yes"]
    assert service["PrivateTmp"] == ["yes"]
    read_only = " ".join(service["ReadOnlyPaths"]).split()
    # /sys (amdgpu), /proc (host), SGLang's metrics dir (optional: "-" prefix).
    assert {"/sys", "/proc", "-/run/sglang-prom"} <= set(read_only)
    assert "ReadWritePaths" not in service


def test_unit_starts_the_installed_exporter_with_a_config_file() -> None:
    service = parse_unit(UNIT.read_text())["Service"]
    (exec_start,) = service["ExecStart"]
    assert exec_start.startswith("/opt/rig-telemetry/.venv/bin/rig-exporter ")
    assert "--config.file=" in exec_start
    assert parse_unit(UNIT.read_text())["Install"]["WantedBy"] == ["multi-user.target"]


def test_unit_gives_room_for_every_connection_and_the_sources() -> None:
    service = parse_unit(UNIT.read_text())["Service"]
    (limit,) = service["LimitNOFILE"]
    # One number sets soft and hard alike; the exporter would raise soft to hard anyway.
    assert limit.isdigit(), limit
    assert int(limit) >= WebConfig().max_connections + RESERVED_FOR_SOURCES


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze not installed: the parse tests above stand in")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this checkout's exporter.
    exporter = Path(sys.executable).with_name("rig-exporter")
    assert exporter.exists(), exporter
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/rig-telemetry/.venv/bin/rig-exporter",
                                             str(exporter)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Unknown or misspelt directives are only warned about ("ignoring"): fail on them.
    assert not re.search(r"Unknown|ignoring|Invalid|Failed", output), output


def test_prometheus_config_for_many_rigs_passes_promtool(tmp_path: Path) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    (sd,) = job["file_sd_configs"]
    assert sd["files"] == ["/etc/prometheus/rig/targets/*.yml"]
    targets = yaml.safe_load((DEPLOY / "targets" / "rigs.yml").read_text())
    assert all("rig" in group["labels"] for group in targets)
    # The installed layout, rebuilt under tmp_path: rules and targets where it expects them.
    config["rule_files"] = [str(REPO / "alerts" / "rig-rules.yaml")]
    sd["files"] = [str(DEPLOY / "targets" / "*.yml")]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run ./setup.sh"
    result = subprocess.run([promtool, "check", "config", str(path)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules found" in result.stdout, result.stdout


def test_the_demo_prometheus_has_the_deployed_layout(tmp_path: Path) -> None:
    """`rigctl demo` writes its own Prometheus config (the checkout's deploy/ does not
    ship); it keeps deploy/prometheus.yml's blocks, jobs and target discovery."""
    deployed = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    demo = prometheus_config(tmp_path / "rules.yaml", "127.0.0.1:9093", tmp_path / "targets")
    assert demo.keys() == deployed.keys()
    assert [job["job_name"] for job in demo["scrape_configs"]] == [
        job["job_name"] for job in deployed["scrape_configs"]]
    for ours, theirs in zip(demo["scrape_configs"], deployed["scrape_configs"], strict=True):
        assert ours.keys() == theirs.keys()
    assert demo["scrape_configs"][0]["file_sd_configs"][0]["files"] == [
        str(tmp_path / "targets" / "*.yml")]


# --- the page's latency as deployed (docs/alerts.md#why-the-stall-alerts-do-not-hold) ---

def test_the_rigs_job_is_scraped_and_evaluated_every_5_s() -> None:
    intervals = Intervals.of_job(yaml.safe_load((DEPLOY / "prometheus.yml").read_text()))
    assert seconds(intervals.scrape) == 5
    assert seconds(intervals.evaluation) == 5
    # Prometheus refuses a timeout over the interval; the exporter's per-source
    # deadline must leave it room to render.
    assert WebConfig().scrape_deadline_seconds < seconds(intervals.scrape_timeout) <= 5


def test_a_stall_pages_within_30_s_of_its_start_at_worst() -> None:
    intervals = Intervals.of_job(yaml.safe_load((DEPLOY / "prometheus.yml").read_text()))
    routing = yaml.safe_load((REPO / "alerts" / "alertmanager.yml").read_text())
    pager = next(r for r in routing["route"]["routes"] if r["receiver"] == "rig-pager")
    group_wait = seconds(pager["group_wait"])
    # Not 0: an inhibiting alert of the same evaluation round arrives first.
    assert 0 < group_wait <= 5
    # Sane: one fault is one page an hour at most, groups not resent every round.
    assert seconds(pager["repeat_interval"]) >= 3600
    assert seconds(routing["route"]["group_interval"]) >= 60
    assert Thresholds().decode_starvation_for_seconds == 0
    worst = (Thresholds().decode_stall_critical_seconds + seconds(intervals.scrape)
             + seconds(intervals.evaluation) + group_wait)
    assert worst < 30, worst

"""/metrics, /, /-/healthy over real HTTP, against the fixture sysfs tree and a proc tree."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest

from exporter.config import load_config
from exporter.daemon.runtime import Exporter
from exporter.daemon.snapshot import SourceError
from exporter.process.launch import start_exporter
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from exporter.sim.rig.sysfs_writer import remove_card
from tests.scrape import get, names, parse_samples, serving, value
from tests.support.sysfs_tree import SYSFS_FIXTURE, card_device, hwmon_dir

# Every GPU family of docs/metrics.md that a 7900 XTX on kernel 6.6+ fills (counters by their
# sample name; rig_gpu_energy_joules_total needs firmware that fills the accumulator).
GPU_FAMILIES = {
    "rig_gpu_present", "rig_gpu_info", "rig_gpu_expected_cards", "rig_gpu_temperature_celsius",
    "rig_gpu_temperature_limit_celsius", "rig_gpu_power_watts", "rig_gpu_power_cap_watts",
    "rig_gpu_power_cap_max_watts", "rig_gpu_clock_hertz", "rig_gpu_clock_max_hertz",
    "rig_gpu_busy_ratio", "rig_gpu_memory_busy_ratio", "rig_gpu_vram_used_bytes",
    "rig_gpu_vram_total_bytes", "rig_gpu_fan_rpm", "rig_gpu_pcie_link_speed_transfers_per_second",
    "rig_gpu_pcie_link_width_lanes", "rig_gpu_throttle_active",
}
HOST_FAMILIES = {
    "rig_host_memory_total_bytes", "rig_host_memory_available_bytes", "rig_host_swap_total_bytes",
    "rig_host_swap_used_bytes", "rig_host_swap_in_bytes_total", "rig_host_swap_out_bytes_total",
    "rig_host_memory_pressure_stall_seconds_total",
}


def exporter_for(sysfs: Path, proc: Path, sources=None) -> Exporter:
    # reading_max_age_seconds 0: a scrape rereads the card tree a test has just changed.
    config = load_config({"gpu": {"backend": "sysfs", "sysfs_root": str(sysfs),
                                  "reading_max_age_seconds": 0},
                          "host": {"proc_root": str(proc)},
                          "web": {"scrape_deadline_seconds": 0.5}})
    return Exporter(config, sources)


async def scrape(exporter: Exporter) -> dict:
    async with serving(exporter) as url:
        status, content_type, body = await get(url + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    return parse_samples(body)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    write_proc(tmp_path / "proc", HostSpec())
    return tmp_path / "proc"


class TestMetrics:
    def test_every_gpu_and_host_family_in_base_units(self, proc_root: Path) -> None:
        samples = asyncio.run(scrape(exporter_for(SYSFS_FIXTURE, proc_root)))
        assert names(samples) >= GPU_FAMILIES | HOST_FAMILIES
        assert value(samples, "rig_gpu_temperature_celsius", card="card1", sensor="junction") == 88
        assert value(samples, "rig_gpu_power_watts", card="card2") == 339.0
        assert value(samples, "rig_gpu_clock_hertz", card="card2", clock="sclk") == 2.1e9
        assert value(samples, "rig_gpu_pcie_link_width_lanes", card="card2", port="upstream",
                     kind="current") == 8
        assert value(samples, "rig_gpu_throttle_active", card="card2", reason="power") == 1
        assert value(samples, "rig_gpu_throttle_active", card="card1", reason="power") == 0
        available = HostSpec().memory_available_bytes
        assert value(samples, "rig_host_memory_available_bytes") == available
        assert value(samples, "rig_host_memory_pressure_stall_seconds_total", kind="some") == 1.25
        for source in ("gpu", "host"):
            assert value(samples, "rig_source_up", source=source) == 1
        assert value(samples, "rig_build_info", version="0.1.0") == 1

    def test_cards_read_are_the_discrete_ones_with_their_kind(self, proc_root: Path) -> None:
        samples = asyncio.run(scrape(exporter_for(SYSFS_FIXTURE, proc_root)))
        assert value(samples, "rig_gpu_info", card="card1", pci_bus="0000:03:00.0",
                     device_id="1002:744c", kind="discrete") == 1
        assert value(samples, "rig_gpu_expected_cards") == 2
        # The fixture's Ryzen iGPU (card3) is not read by default.
        assert value(samples, "rig_gpu_present", card="card3", pci_bus="0000:7c:00.0",
                     unique_id="") is None

    def test_no_cards_at_all_still_says_how_many_are_expected(
        self, tmp_path: Path, proc_root: Path
    ) -> None:
        (tmp_path / "sys" / "class" / "drm").mkdir(parents=True)
        samples = asyncio.run(scrape(exporter_for(tmp_path / "sys", proc_root)))
        assert value(samples, "rig_source_up", source="gpu") == 1
        assert value(samples, "rig_gpu_expected_cards") == 2
        assert "rig_gpu_present" not in names(samples)

    def test_no_colons_and_base_unit_suffixes(self, proc_root: Path) -> None:
        samples = asyncio.run(scrape(exporter_for(SYSFS_FIXTURE, proc_root)))
        for name in names(samples):
            assert ":" not in name and name.startswith("rig_")

    def test_exposition_passes_promtool_lint(self, proc_root: Path) -> None:
        async def body() -> str:
            async with serving(exporter_for(SYSFS_FIXTURE, proc_root)) as url:
                return (await get(url + "/metrics"))[2]

        check = subprocess.run(["promtool", "check", "metrics"], input=asyncio.run(body()),
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


class TestBrokenFixtures:
    """Each broken variant keeps /metrics at 200 with every other reading intact."""

    def test_truncated_gpu_metrics(self, sysfs_root: Path, proc_root: Path) -> None:
        blob = card_device(sysfs_root, "card2") / "gpu_metrics"
        blob.write_bytes(blob.read_bytes()[:50])
        samples = asyncio.run(scrape(exporter_for(sysfs_root, proc_root)))
        assert value(samples, "rig_gpu_throttle_active", card="card2", reason="power") is None
        assert value(samples, "rig_gpu_throttle_active", card="card1", reason="power") == 0
        assert value(samples, "rig_gpu_power_watts", card="card2") == 339.0
        assert value(samples, "rig_source_up", source="gpu") == 1

    def test_unknown_gpu_metrics_revision(self, sysfs_root: Path, proc_root: Path) -> None:
        blob = card_device(sysfs_root, "card1") / "gpu_metrics"
        blob.write_bytes(blob.read_bytes()[:2] + bytes([3, 0]) + blob.read_bytes()[4:])
        samples = asyncio.run(scrape(exporter_for(sysfs_root, proc_root)))
        assert value(samples, "rig_gpu_energy_joules_total", card="card1") is None
        assert value(samples, "rig_gpu_throttle_active", card="card1", reason="power") is None
        assert value(samples, "rig_gpu_temperature_celsius", card="card1", sensor="edge") == 66

    def test_non_numeric_hwmon_file(self, sysfs_root: Path, proc_root: Path) -> None:
        (hwmon_dir(sysfs_root, "card2") / "power1_average").write_text("N/A\n")
        samples = asyncio.run(scrape(exporter_for(sysfs_root, proc_root)))
        assert value(samples, "rig_gpu_power_watts", card="card2") is None
        assert value(samples, "rig_gpu_power_watts", card="card1") == 287.0
        assert value(samples, "rig_gpu_power_cap_watts", card="card2") == 339.0

    def test_card_vanishes_between_scrapes(self, sysfs_root: Path, proc_root: Path) -> None:
        async def two_scrapes():
            exporter = exporter_for(sysfs_root, proc_root)
            first = await scrape(exporter)
            remove_card(sysfs_root, "card1")
            return first, await scrape(exporter)

        first, second = asyncio.run(two_scrapes())
        identity = {"card": "card1", "pci_bus": "0000:03:00.0", "unique_id": "6a3c1f2b9e04d751"}
        assert value(first, "rig_gpu_present", **identity) == 1
        assert value(second, "rig_gpu_present", **identity) == 0
        assert value(second, "rig_gpu_temperature_celsius", card="card1", sensor="edge") is None
        assert value(second, "rig_gpu_temperature_celsius", card="card2", sensor="edge") == 71

    def test_missing_sysfs_root_fails_only_the_gpu_source(
        self, tmp_path: Path, proc_root: Path
    ) -> None:
        samples = asyncio.run(scrape(exporter_for(tmp_path / "absent", proc_root)))
        assert value(samples, "rig_source_up", source="gpu") == 0
        assert value(samples, "rig_source_up", source="host") == 1
        assert "rig_gpu_present" not in names(samples)
        assert value(samples, "rig_host_memory_total_bytes") == HostSpec().memory_total_bytes


class HangingSource:
    name = "engine/stuck"

    async def read(self) -> object:
        await asyncio.sleep(30)


class FailingSource:
    name = "engine/broken"

    async def read(self) -> object:
        raise SourceError("HTTP 500 from http://127.0.0.1:30000/metrics")


def test_hanging_and_failing_sources_do_not_blank_the_others(proc_root: Path) -> None:
    exporter = exporter_for(SYSFS_FIXTURE, proc_root)
    exporter = exporter_for(SYSFS_FIXTURE, proc_root,
                            [*exporter.sources, HangingSource(), FailingSource()])
    started = time.monotonic()
    samples = asyncio.run(scrape(exporter))
    assert time.monotonic() - started < 5  # the 0.5 s deadline, not the 30 s hang
    assert value(samples, "rig_source_up", source="engine/stuck") == 0
    assert value(samples, "rig_source_up", source="engine/broken") == 0
    assert value(samples, "rig_source_up", source="gpu") == 1
    assert value(samples, "rig_gpu_temperature_celsius", card="card1", sensor="junction") == 88


def test_landing_page_and_healthy(proc_root: Path) -> None:
    async def fetch():
        exporter = exporter_for(SYSFS_FIXTURE, proc_root, [FailingSource()])
        async with serving(exporter) as url:
            return await get(url + "/"), await get(url + "/-/healthy")

    (status, content_type, page), (healthy_status, _, healthy_body) = asyncio.run(fetch())
    assert status == 200 and content_type.startswith("text/html")
    assert 'href="/metrics"' in page and 'href="/api/health"' in page
    assert "engine/broken" in page and "HTTP 500" in page
    assert "<h2>health: " in page
    assert (healthy_status, healthy_body) == (200, "OK\n")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_real_process_serves_and_stops_cleanly(proc_root: Path, tmp_path: Path,
                                               stop_signal: int) -> None:
    with start_exporter(["--sysfs.root", str(SYSFS_FIXTURE), "--proc.root", str(proc_root)],
                        tmp_path) as exporter:
        status, _, body = asyncio.run(get(exporter.url + "/metrics"))
        assert status == 200
        assert value(parse_samples(body), "rig_gpu_power_watts", card="card1") == 287.0
        exporter.popen.send_signal(stop_signal)
        assert exporter.popen.wait(timeout=10) == 0, exporter.log()

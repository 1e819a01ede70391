"""The sysfs GPU reader against the committed two-card tree and its broken variants."""

from __future__ import annotations

import errno
import filecmp
import logging
import os
import tracemalloc
from pathlib import Path

import pytest

from exporter.daemon.snapshot import SourceError
from exporter.daemon.sources import amdgpu_sysfs
from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs, CardReading
from exporter.daemon.sources.files import GPU_METRICS_MAX_BYTES, TEXT_MAX_BYTES
from exporter.sim.rig.sysfs_writer import (
    FIXTURE_CARDS,
    OLDER_LAYOUT_CARD,
    RIG_CARDS,
    remove_card,
    write_card,
    write_rig,
)
from tests.support.sysfs_tree import SYSFS_FIXTURE, card_device, hwmon_dir


def read(root: Path) -> dict[str, CardReading]:
    return {c.card: c for c in AmdgpuSysfs(root).read_cards()}


class TestFixtureTree:
    def test_committed_tree_matches_its_writer(self, tmp_path: Path) -> None:
        write_rig(tmp_path, FIXTURE_CARDS)
        mismatches = []
        for one, other in ((SYSFS_FIXTURE, tmp_path), (tmp_path, SYSFS_FIXTURE)):
            for dirpath, _, filenames in os.walk(one):
                for name in filenames:
                    path = Path(dirpath) / name
                    twin = other / path.relative_to(one)
                    if not twin.exists() or not filecmp.cmp(path, twin, shallow=False):
                        mismatches.append(str(path.relative_to(one)))
        regenerate = "python -m exporter.sim.rig.sysfs_writer tests/fixtures/sys"
        assert mismatches == [], f"stale fixture tree; regenerate with: {regenerate}"

    def test_enumerates_only_amdgpu_cards(self) -> None:
        # card0 is a non-AMD framebuffer; renderD* and card1-DP-1 share or lack a device.
        assert sorted(read(SYSFS_FIXTURE)) == ["card1", "card2"]

    def test_identity_comes_from_the_pci_device(self) -> None:
        cards = read(SYSFS_FIXTURE)
        assert (cards["card1"].pci_bus, cards["card1"].unique_id) == (
            RIG_CARDS[0].endpoint, RIG_CARDS[0].unique_id)
        assert cards["card2"].pci_bus == "0000:0a:00.0"


class TestValuesInBaseUnits:
    def test_temperatures_and_limits_are_celsius(self) -> None:
        card = read(SYSFS_FIXTURE)["card1"]
        assert card.temperatures_celsius == {"edge": 66.0, "junction": 88.0, "memory": 86.0}
        assert card.temperature_limits_celsius[("junction", "critical")] == 110.0
        assert card.temperature_limits_celsius[("memory", "emergency")] == 113.0

    def test_power_is_power1_average_on_kernel_6_6(self) -> None:
        # power1_input is hidden (GPU_INPUT_POWER is EOPNOTSUPP on SMU 13.0.0).
        cards = read(SYSFS_FIXTURE)
        assert cards["card1"].power_watts == 287.0  # power1_average 287000000 uW
        assert cards["card2"].power_watts == 339.0
        assert cards["card2"].power_cap_watts == 339.0
        assert cards["card2"].power_cap_max_watts == 350.0

    def test_clocks_are_hertz_with_the_top_dpm_level_as_max(self) -> None:
        card = read(SYSFS_FIXTURE)["card2"]
        assert card.clocks_hertz == {"sclk": 2.1e9, "mclk": 1.249e9}
        assert card.clock_max_hertz == {"sclk": 2.304e9, "mclk": 1.249e9}

    def test_a_boosting_card_runs_above_its_top_level(self) -> None:
        card = read(SYSFS_FIXTURE)["card1"]
        assert card.clocks_hertz["sclk"] == 2.45e9
        assert card.clock_max_hertz["sclk"] == 2.304e9

    def test_busy_vram_and_fan(self) -> None:
        card = read(SYSFS_FIXTURE)["card1"]
        assert (card.busy_ratio, card.memory_busy_ratio) == (0.99, 0.41)
        assert (card.vram_used_bytes, card.vram_total_bytes) == (23622320128, 25753026560)
        assert card.fan_rpm == 1712

    def test_upstream_port_shows_the_narrow_slot(self) -> None:
        links = {(lk.port, lk.kind): lk for lk in read(SYSFS_FIXTURE)["card2"].pcie_links}
        assert links[("endpoint", "current")].width_lanes == 16
        assert links[("upstream", "current")].width_lanes == 8
        assert links[("upstream", "max")].width_lanes == 16
        assert links[("upstream", "current")].speed_transfers_per_second == 16e9

    def test_throttle_reasons_from_gpu_metrics(self) -> None:
        cards = read(SYSFS_FIXTURE)
        assert cards["card1"].throttle_reasons == frozenset()
        assert cards["card2"].throttle_reasons == {"power", "thermal_junction"}

    def test_no_energy_where_the_firmware_leaves_the_counter_at_zero(self) -> None:
        assert [c.energy_joules for c in read(SYSFS_FIXTURE).values()] == [None, None]


class TestOlderLayout:
    """card1 as the fixture had it before kernel 6.6: power1_input, a filled counter."""

    @pytest.fixture
    def older(self, tmp_path: Path) -> Path:
        write_card(tmp_path, OLDER_LAYOUT_CARD)
        return tmp_path

    def test_power_prefers_input_and_falls_back_to_average(self, older: Path) -> None:
        assert read(older)["card1"].power_watts == 287.0  # power1_input, beside 285 W average

    def test_energy_counter_starts_with_the_exporter(self, older: Path) -> None:
        assert read(older)["card1"].energy_joules == 0.0


class TestBrokenInput:
    def test_truncated_gpu_metrics_loses_only_throttle(
        self, sysfs_root: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        path = card_device(sysfs_root, "card1") / "gpu_metrics"
        path.write_bytes(path.read_bytes()[:60])
        card = read(sysfs_root)["card1"]
        assert card.throttle_reasons is None and card.energy_joules is None
        assert card.temperatures_celsius["junction"] == 88.0
        assert "gpu_metrics" in caplog.text

    def test_unknown_gpu_metrics_revision_is_absent_not_guessed(self, sysfs_root: Path) -> None:
        path = card_device(sysfs_root, "card2") / "gpu_metrics"
        blob = bytearray(path.read_bytes())
        blob[2:4] = bytes([2, 9])  # format 2, content 9
        path.write_bytes(bytes(blob))
        cards = read(sysfs_root)
        assert cards["card2"].throttle_reasons is None
        assert cards["card1"].throttle_reasons == frozenset()

    def test_the_reader_keeps_the_revision_and_each_file_s_problem(
            self, sysfs_root: Path) -> None:
        """What `rigctl doctor` reports per card: the revision read, and why a file
        could not be used."""
        metrics = card_device(sysfs_root, "card2") / "gpu_metrics"
        blob = bytearray(metrics.read_bytes())
        blob[2:4] = bytes([1, 4])
        metrics.write_bytes(bytes(blob))
        (card_device(sysfs_root, "card1") / "pp_dpm_mclk").write_text("level one\n")
        reader = AmdgpuSysfs(sysfs_root)
        cards = {c.card: c for c in reader.read_cards()}
        assert cards["card1"].gpu_metrics_revision == (1, 3)
        assert cards["card2"].gpu_metrics_revision == (1, 4)
        assert reader.problems[("card2", "gpu_metrics")] == "revision 1.4 has no known layout here"
        assert reader.problems[("card1", "pp_dpm_mclk")] == "unexpected line 'level one'"
        assert ("card1", "gpu_metrics") not in reader.problems

    def test_non_numeric_hwmon_file_drops_that_reading_only(self, sysfs_root: Path) -> None:
        (hwmon_dir(sysfs_root, "card1") / "temp2_input").write_text("garbage\n")
        card = read(sysfs_root)["card1"]
        assert "junction" not in card.temperatures_celsius
        assert card.temperatures_celsius["edge"] == 66.0
        assert card.power_watts == 287.0

    def test_unreadable_file_is_absent_and_logged_once(
        self, sysfs_root: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        # A directory where a file should be fails to read like EPERM does: an OSError.
        busy = card_device(sysfs_root, "card1") / "gpu_busy_percent"
        busy.unlink()
        busy.mkdir()
        reader = AmdgpuSysfs(sysfs_root)
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                card = {c.card: c for c in reader.read_cards()}["card1"]
        assert card.busy_ratio is None
        assert caplog.text.count("gpu_busy_percent") == 1

    def test_garbage_dpm_table_drops_the_clock_max(self, sysfs_root: Path) -> None:
        (card_device(sysfs_root, "card1") / "pp_dpm_sclk").write_text("\x00\xff garbage\n")
        card = read(sysfs_root)["card1"]
        assert "sclk" not in card.clock_max_hertz
        assert card.clocks_hertz["sclk"] == 2.45e9  # hwmon freq1_input still reads

    def test_out_of_range_percentage_is_absent(self, sysfs_root: Path) -> None:
        (card_device(sysfs_root, "card2") / "gpu_busy_percent").write_text("250\n")
        assert read(sysfs_root)["card2"].busy_ratio is None

    def test_card_that_vanishes_keeps_its_identity_with_present_false(
        self, sysfs_root: Path
    ) -> None:
        reader = AmdgpuSysfs(sysfs_root)
        assert all(c.present for c in reader.read_cards())
        remove_card(sysfs_root, "card2")
        cards = {c.card: c for c in reader.read_cards()}
        assert cards["card1"].present
        gone = cards["card2"]
        assert (gone.present, gone.pci_bus, gone.unique_id) == (
            False, "0000:0a:00.0", "1b7e04c2d95a3f60")
        assert gone.temperatures_celsius == {}

    def test_missing_root_raises_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(SourceError, match="class/drm"):
            AmdgpuSysfs(tmp_path / "nope").read_cards()


# pp_dpm_sclk as the kernel prints it. Two printers exist for SMU 13.0.0:
# `smu_v13_0_0_print_clk_levels` (exact-match stars, a fake middle line for a current
# clock between the levels) and the shared `smu_cmn_print_dpm_clk_levels` of the
# 2025-12 series ("%d: %uMhz %s\n", 25 MHz tolerance, an `S:` line in deep sleep).
SCLK_TABLES = {
    # The top level is clamped to GameClockAc; the real clock boosts above it.
    "boost above the top level": ("0: 500Mhz\n1: 2450Mhz *\n2: 2304Mhz\n", 2.45e9, 2.304e9),
    "downclocked below the top": ("0: 500Mhz\n1: 1650Mhz *\n2: 2304Mhz\n", 1.65e9, 2.304e9),
    "at the minimum": ("0: 500Mhz *\n1: 2304Mhz \n", 0.5e9, 2.304e9),
    "idle, old printer": ("0: 500Mhz\n1: 5Mhz *\n2: 2304Mhz\n", 5e6, 2.304e9),
    "deep sleep, shared printer": ("S: 5Mhz *\n1: 500Mhz \n2: 2304Mhz \n", 5e6, 2.304e9),
    "boost, shared printer": ("0: 500Mhz \n1: 2450Mhz *\n2: 2304Mhz \n", 2.45e9, 2.304e9),
    # The shared printer never stars level 2 of a fine-grained table: at the top
    # clock it prints no `*` at all.
    "at the top, shared printer": ("0: 500Mhz \n1: 2304Mhz \n", None, 2.304e9),
}


class TestDpmTables:
    @pytest.mark.parametrize(("text", "current", "top"), SCLK_TABLES.values(), ids=SCLK_TABLES)
    def test_max_is_the_last_line_and_current_the_starred_one(
        self, sysfs_root: Path, text: str, current: float | None, top: float
    ) -> None:
        device = card_device(sysfs_root, "card1")
        (device / "pp_dpm_sclk").write_text(text)
        for name in ("freq1_input", "freq1_label"):  # only the table tells the current clock
            (hwmon_dir(sysfs_root, "card1") / name).unlink()
        card = read(sysfs_root)["card1"]
        assert card.clock_max_hertz["sclk"] == top
        assert card.clocks_hertz.get("sclk") == current

    def test_discrete_table_without_a_star_keeps_its_max(self, sysfs_root: Path) -> None:
        # The old printer stars only an exact match: a uclk of 1250 MHz stars nothing.
        device = card_device(sysfs_root, "card2")
        (device / "pp_dpm_mclk").write_text("0: 96Mhz \n1: 456Mhz \n2: 772Mhz \n3: 1249Mhz \n")
        card = read(sysfs_root)["card2"]
        assert card.clock_max_hertz["mclk"] == 1.249e9
        assert card.clocks_hertz["mclk"] == 1.249e9  # from hwmon freq2_input

    @pytest.mark.parametrize("text", ["", "0: fastMhz *\n", "0: 500Mhz\nX: 2304Mhz\n",
                                      "0: 500Mhz\n1: 2304Ghz\n"])
    def test_garbage_tables_are_absent(self, sysfs_root: Path, text: str) -> None:
        (card_device(sysfs_root, "card1") / "pp_dpm_sclk").write_text(text)
        assert "sclk" not in read(sysfs_root)["card1"].clock_max_hertz


def test_power1_input_that_answers_eopnotsupp_falls_back_quietly(
    sysfs_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A kernel that shows power1_input though the SMU answers -EOPNOTSUPP on read.
    (hwmon_dir(sysfs_root, "card2") / "power1_input").write_text("")
    real = amdgpu_sysfs.read_capped

    def not_supported(path: Path, max_bytes: int) -> bytes:
        if path.name == "power1_input":
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real(path, max_bytes)

    monkeypatch.setattr(amdgpu_sysfs, "read_capped", not_supported)
    with caplog.at_level(logging.WARNING):
        cards = read(sysfs_root)
    assert cards["card2"].power_watts == 339.0
    assert "power1_input" not in caplog.text


class TestReadsAreCapped:
    """A file no kernel would write costs its limit, not the exporter's memory."""

    def test_a_link_to_dev_zero_is_that_files_error(
        self, sysfs_root: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        busy = card_device(sysfs_root, "card1") / "gpu_busy_percent"
        busy.unlink()
        busy.symlink_to("/dev/zero")
        with caplog.at_level(logging.WARNING):
            card = read(sysfs_root)["card1"]
        assert card.busy_ratio is None
        assert card.memory_busy_ratio == 0.41  # the card's other files read as ever
        assert f"longer than {TEXT_MAX_BYTES} bytes" in caplog.text

    def test_a_huge_gpu_metrics_is_read_no_further_than_its_limit(
        self, sysfs_root: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        metrics = card_device(sysfs_root, "card1") / "gpu_metrics"
        with metrics.open("r+b") as f:
            f.truncate(64 * 1024 * 1024)  # sparse: no disk, 64 MiB to whoever reads it all
        tracemalloc.start()
        try:
            card = read(sysfs_root)["card1"]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert card.throttle_reasons is None
        assert peak < 4 * GPU_METRICS_MAX_BYTES
        assert "card1: gpu_metrics" in caplog.text

"""The simulated cards' pp_dpm text, printed as both SMU 13.0.0 printers do, reads back
as the clock it was written with; the fixture's named variants hold what they say."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs, parse_dpm_table
from exporter.sim.rig.sysfs_writer import RIG_CARDS, _dpm_table, idle, write_card

SCLK, MCLK = (500, 2304), (96, 456, 772, 1249)


@given(st.integers(min_value=1, max_value=3500), st.sampled_from(["smu13", "shared"]))
def test_sclk_reads_back_with_the_last_line_as_max(mhz: int, printer: str) -> None:
    table = parse_dpm_table(_dpm_table(SCLK, mhz, True, printer))
    assert table.top_hertz == 2304e6
    if printer == "shared" and abs(mhz - 2304) <= 25:
        assert table.current_hertz is None  # the shared printer never stars the top
    elif printer == "shared" and abs(mhz - 500) <= 25 and mhz >= 250:
        assert table.current_hertz == 500e6  # within 25 MHz counts as the level
    else:
        assert table.current_hertz == mhz * 1e6


@given(st.sampled_from(MCLK), st.sampled_from(["smu13", "shared"]))
def test_mclk_at_a_level_is_starred(mhz: int, printer: str) -> None:
    assert parse_dpm_table(_dpm_table(MCLK, mhz, False, printer)).current_hertz == mhz * 1e6


def test_deep_sleep_prints_the_s_line() -> None:
    assert _dpm_table(SCLK, 5, True, "shared") == "S: 5Mhz *\n1: 500Mhz \n2: 2304Mhz \n"
    assert _dpm_table(SCLK, 5, True, "smu13") == "0: 500Mhz\n1: 5Mhz *\n2: 2304Mhz\n"


def test_an_idle_card_on_the_shared_printer_reads_its_deep_sleep_clock(tmp_path: Path) -> None:
    write_card(tmp_path, idle(RIG_CARDS[1]))
    card = AmdgpuSysfs(tmp_path).read_cards()[0]
    assert card.clocks_hertz["sclk"] == 5e6
    assert card.clock_max_hertz["sclk"] == 2.304e9
    assert card.fan_rpm == 0 and card.power_watts == 10.0

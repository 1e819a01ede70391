"""GPU families: one series set per card read, and a vanished card down to rig_gpu_present 0."""

from __future__ import annotations

from exporter.daemon.sources.gpu import GpuReading
from exporter.daemon.sources.gpu_metrics import THROTTLE_REASONS
from tests.daemon.collector.registry import answered, collected, sample_names
from tests.support.rig_readings import card

CARD1 = {"card": "card1"}


def test_card_families_in_base_units() -> None:
    registry = collected(answered("gpu", GpuReading("sysfs", [card("card1")], 2)))
    get = registry.get_sample_value
    assert get("rig_gpu_expected_cards") == 2.0
    assert get("rig_gpu_present", {**CARD1, "pci_bus": "0000:03:00.0",
                                   "unique_id": "6a3c1f2b9e04d751"}) == 1.0
    assert get("rig_gpu_info", {**CARD1, "pci_bus": "0000:03:00.0", "device_id": "",
                                "kind": "discrete"}) == 1.0
    assert get("rig_gpu_temperature_celsius", {**CARD1, "sensor": "junction"}) == 88.0
    assert get("rig_gpu_temperature_limit_celsius",
               {**CARD1, "sensor": "junction", "limit": "critical"}) == 110.0
    assert get("rig_gpu_power_watts", CARD1) == 285.0
    assert get("rig_gpu_power_cap_watts", CARD1) == 339.0
    assert get("rig_gpu_clock_hertz", {**CARD1, "clock": "sclk"}) == 2.25e9
    assert get("rig_gpu_clock_max_hertz", {**CARD1, "clock": "sclk"}) == 2.304e9
    assert get("rig_gpu_busy_ratio", CARD1) == 0.99
    assert get("rig_gpu_pcie_link_width_lanes",
               {**CARD1, "port": "upstream", "kind": "current"}) == 16.0
    assert get("rig_gpu_pcie_link_speed_transfers_per_second",
               {**CARD1, "port": "endpoint", "kind": "max"}) == 16e9


def test_throttle_reasons_read_one_or_zero_each() -> None:
    hot = card("card1", throttle_reasons=frozenset({"power"}))
    registry = collected(answered("gpu", GpuReading("sysfs", [hot])))
    values = {reason: registry.get_sample_value("rig_gpu_throttle_active",
                                                {**CARD1, "reason": reason})
              for reason in THROTTLE_REASONS}
    assert values == {reason: 1.0 if reason == "power" else 0.0 for reason in THROTTLE_REASONS}


def test_unread_values_are_absent_not_zero() -> None:
    # card() has no fan, VRAM or energy reading, and None throttle reasons means unknown.
    registry = collected(answered("gpu", GpuReading("sysfs", [card("card1",
                                                                    throttle_reasons=None)])))
    for family in ("rig_gpu_fan_rpm", "rig_gpu_vram_used_bytes", "rig_gpu_energy_joules_total"):
        assert registry.get_sample_value(family, CARD1) is None, family
    assert "rig_gpu_throttle_active" not in sample_names(registry)
    # Without [gpu] expected_cards there is no count to compare against.
    assert registry.get_sample_value("rig_gpu_expected_cards") is None


def test_a_vanished_card_keeps_only_present_zero() -> None:
    gone = card("card2", pci_bus="0000:07:00.0", unique_id="0f1e2d3c4b5a6978", present=False)
    registry = collected(answered("gpu", GpuReading("sysfs", [card("card1"), gone], 2)))
    assert registry.get_sample_value("rig_gpu_present", {
        "card": "card2", "pci_bus": "0000:07:00.0", "unique_id": "0f1e2d3c4b5a6978"}) == 0.0
    card2 = [s for f in registry.collect() for s in f.samples if s.labels.get("card") == "card2"]
    assert [s.name for s in card2] == ["rig_gpu_present"]
    assert registry.get_sample_value("rig_gpu_power_watts", CARD1) == 285.0

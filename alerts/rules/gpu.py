"""GPU alerts: thermal downclock, hot, power capped, missing, PCIe degraded."""

from __future__ import annotations

from alerts.rules.common import CARD_SUBJECT, HEADROOM, SCLK_RATIO, Alert, dur, num, pct
from exporter.schema import (
    CARD_SENSOR_SERIES,
    CARD_SERIES,
    HOT_SENSORS_MATCHER,
    THERMAL_DOWNCLOCK_MATCHER,
)
from exporter.thresholds import Thresholds


def gpu_alerts(t: Thresholds) -> list[Alert]:
    # The hotspot's throttle bit is left out (exporter/schema.py): the junction counts
    # through its temperature.
    downclock = f"""
{SCLK_RATIO} < {num(t.gpu_sclk_ratio)}
and on({CARD_SERIES})
rig_gpu_busy_ratio >= {num(t.gpu_busy_ratio)}
and on({CARD_SERIES})
(
  {HEADROOM}{{sensor="junction"}} <= {num(t.gpu_junction_margin_celsius)}
  or on({CARD_SERIES})
  rig_gpu_throttle_active{{{THERMAL_DOWNCLOCK_MATCHER}}} == 1
)
"""
    downclock_description = (
        CARD_SUBJECT + " runs its sclk at {{ $value | humanizePercentage }} of its maximum under"
        f" load (alert below {pct(t.gpu_sclk_ratio)}), with the junction within "
        + num(t.gpu_junction_margin_celsius)
        + " °C of its limit or a thermal throttle reason set."
    )

    def downclock_summary(for_seconds: int) -> str:
        return (
            f"Under load, a GPU's sclk has stayed below {pct(t.gpu_sclk_ratio)} of its maximum"
            f" for {dur(for_seconds)}, its junction within {num(t.gpu_junction_margin_celsius)}"
            " °C of its limit or a thermal throttle reason set."
        )

    airflow = "The card's fans (rig_gpu_fan_rpm) and the airflow between the two cards."
    missing = "dmesg for an amdgpu reset or a PCIe link drop (AER)."
    pcie = "lspci -vv LnkSta of the card and its upstream port: reseat, riser, BIOS slot setting."
    busy = f"and on({CARD_SERIES})\nrig_gpu_busy_ratio >= {num(t.gpu_busy_ratio)}"
    alerts = [
        Alert(
            "RigGpuThermalDownclock",
            "warning",
            downclock,
            t.gpu_downclock_for_seconds,
            downclock_summary(t.gpu_downclock_for_seconds),
            downclock_description,
            airflow,
        ),
        Alert(
            "RigGpuThermalDownclock",
            "critical",
            downclock,
            t.gpu_downclock_critical_for_seconds,
            downclock_summary(t.gpu_downclock_critical_for_seconds),
            downclock_description,
            airflow,
        ),
        Alert(
            "RigGpuHot",
            "warning",
            f"""
rig_gpu_temperature_celsius{{{HOT_SENSORS_MATCHER}}}
and on({CARD_SENSOR_SERIES})
{HEADROOM} <= {num(t.gpu_hot_margin_celsius)}
""",
            t.gpu_hot_for_seconds,
            f"A GPU's junction or memory has run within {num(t.gpu_hot_margin_celsius)} °C of"
            f" its critical temperature for {dur(t.gpu_hot_for_seconds)}.",
            "The {{ $labels.sensor }} temperature of card {{ $labels.card }} on"
            " {{ $labels.instance }} is {{ $value }} °C, within "
            + num(t.gpu_hot_margin_celsius)
            + " °C of its critical limit.",
            airflow,
        ),
        Alert(
            "RigGpuPowerCapped",
            "info",
            # PPT0 follows power1_cap; the owner lowered it to 305 W on purpose.
            f"""
rig_gpu_power_watts >= rig_gpu_power_cap_watts * {num(t.gpu_power_cap_ratio)}
and on({CARD_SERIES})
rig_gpu_throttle_active{{reason="power"}} == 1
""",
            t.gpu_power_capped_for_seconds,
            f"A GPU has drawn {pct(t.gpu_power_cap_ratio)} of its power cap or more, with the"
            f" power throttle set, for {dur(t.gpu_power_capped_for_seconds)}.",
            CARD_SUBJECT + " draws {{ $value }} W, at its power cap: its clock is held by the"
            " power limit.",
            "Nothing, if the cap was lowered on purpose: rig_gpu_power_cap_watts.",
        ),
        *gpu_missing(t, missing),
        Alert(
            "RigGpuPcieDegraded",
            "warning",
            f"""
rig_gpu_pcie_link_speed_transfers_per_second{{kind="current"}}
< ignoring(kind) rig_gpu_pcie_link_speed_transfers_per_second{{kind="max"}}
{busy}
""",
            t.gpu_pcie_for_seconds,
            "Under load, a GPU's PCIe link has run slower than its maximum for"
            f" {dur(t.gpu_pcie_for_seconds)}.",
            CARD_SUBJECT + "{{ with $labels.port }} ({{ . }} port){{ end }} runs its PCIe link"
            " at {{ $value | humanize }}T/s under load, below its maximum.",
            pcie,
            signal="speed",
        ),
        Alert(
            "RigGpuPcieDegraded",
            "warning",
            f"""
rig_gpu_pcie_link_width_lanes{{kind="current"}}
< ignoring(kind) rig_gpu_pcie_link_width_lanes{{kind="max"}}
< {t.gpu_pcie_min_width_lanes}
{busy}
""",
            t.gpu_pcie_for_seconds,
            "Under load, a GPU's PCIe link has run narrower than its maximum and below"
            f" x{t.gpu_pcie_min_width_lanes} for {dur(t.gpu_pcie_for_seconds)}.",
            CARD_SUBJECT + "{{ with $labels.port }} ({{ . }} port){{ end }} runs its PCIe link"
            " at x{{ $value }} under load, below its maximum and"
            f" x{t.gpu_pcie_min_width_lanes}.",
            pcie,
            signal="width",
        ),
    ]
    return alerts


# The expected count comes from the exporter's [gpu] expected_cards, exported as
# rig_gpu_expected_cards (absent when 0): every rig states its own.
# `count without` keeps the target's own labels (deploy/'s `rig`), and so does
# matching on every label: a one-to-one `on(job, instance)` would drop them.
_CARDS_READ = "count without (card, pci_bus, unique_id) (rig_gpu_present == 1)"
_CARDS_KNOWN = "count without (card, pci_bus, unique_id) (rig_gpu_present)"
_EXPECTED = (
    '{{ with printf "rig_gpu_expected_cards{instance=%q}" $labels.instance | query }}'
    "{{ . | first | value }}{{ end }}"
)


def gpu_missing(t: Thresholds, look_first: str) -> list[Alert]:
    """One page per fault. A card the exporter saw and lost keeps its series at 0
    (docs/gpu.md#which-cards) and pages with its card label. The count pages only for cards the
    exporter never saw (none at all, or fewer than expected after a restart):
    while the known cards, vanished ones included, make up the expected number,
    a shortfall is already paged card by card."""
    return [
        Alert(
            "RigGpuMissing",
            "critical",
            "rig_gpu_present == 0",
            t.gpu_missing_for_seconds,
            f"A GPU the exporter was reading has been gone for {dur(t.gpu_missing_for_seconds)}.",
            "Card {{ $labels.card }} (PCI {{ $labels.pci_bus }}) on {{ $labels.instance }}"
            " is no longer present.",
            look_first,
            signal="vanished",
        ),
        Alert(
            "RigGpuMissing",
            "critical",
            f"""
(
  {_CARDS_READ}
  or
  rig_gpu_expected_cards * 0
)
< rig_gpu_expected_cards
unless
{_CARDS_KNOWN} >= rig_gpu_expected_cards
""",
            t.gpu_missing_for_seconds,
            "Fewer GPUs than [gpu] expected_cards have been read for"
            f" {dur(t.gpu_missing_for_seconds)}, and the missing ones were never seen.",
            "Only {{ $value }} GPU(s) are read on {{ $labels.instance }}, fewer than the "
            + _EXPECTED + " its [gpu] expected_cards says.",
            look_first,
            signal="count",
        ),
    ]

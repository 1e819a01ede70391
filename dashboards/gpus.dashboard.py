"""GPUs: which card is hot, and is it held down (docs/gpu.md).

Each reading is drawn against its own limit: temperatures against the critical
limit the driver reports, power against its cap, sclk against the top DPM level,
PCIe against the link's maximum. On Navi 31 the hotspot throttle bit is set
almost always, even at idle (docs/facts/amdgpu.md#navi-31-hotspot-bit), so the
throttle timeline is read together with the clock.
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from alerts.rules.common import HEADROOM, SCLK_RATIO
from dashboards.panels import (
    UIDS,
    Section,
    falling_steps,
    on_off,
    over_interval,
    rig_dashboard,
    sel,
    stat,
    state_timeline,
    steps,
    threshold_override,
    timeseries,
)
from dashboards.panels import (
    targets as queries,
)
from exporter.schema import (
    CARD_SERIES,
    HOT_SENSORS_MATCHER,
    HOTSPOT_REASON,
    OTHER_SENSORS_MATCHER,
)
from exporter.thresholds import Thresholds

LIMIT_LINES = ".* (critical|cap|max|total)$"
CURRENT, MAX = 'kind="current"', 'kind="max"'
# In transfers per second; drawn in GT/s, Grafana having no such unit.
PCIE_SPEED = "rig_gpu_pcie_link_speed_transfers_per_second"


def _temperature(sensor: str, t: Thresholds, alerts: tuple[str, ...]) -> object:
    temp = sel("rig_gpu_temperature_celsius", f'sensor="{sensor}"')
    limit = sel("rig_gpu_temperature_limit_celsius", f'sensor="{sensor}"', 'limit="critical"')
    return timeseries(
        f"{sensor.title()} temperature against its critical limit",
        f"The {sensor} temperature of each card, its critical limit (dashed red) and the"
        f" line {t.gpu_hot_margin_celsius:g} °C below that limit where a card counts as hot.",
        "celsius",
        queries(
            (temp, "{{card}}"),
            (f"{limit} - {t.gpu_hot_margin_celsius:g}", "{{card}} hot line"),
            (limit, "{{card}} critical"),
        ),
        overrides=[threshold_override(LIMIT_LINES), threshold_override(".* hot line$")],
        alerts=alerts,
        w=8,
    )


def build(t: Thresholds) -> Dashboard:
    throttle = sel("rig_gpu_throttle_active", f'reason!="{HOTSPOT_REASON}"')
    temperatures = Section("Temperatures", [
        _temperature("junction", t, ("RigGpuHot", "RigGpuThermalDownclock")),
        _temperature("edge", t, ()),
        _temperature("memory", t, ("RigGpuHot",)),
        timeseries(
            "Headroom to the critical limit",
            "Degrees left before each sensor's critical limit, the least of each interval."
            f" At {t.gpu_hot_margin_celsius:g} °C or less at the junction or memory a card is"
            f" hot; at {t.gpu_junction_margin_celsius:g} °C or less at the junction, with the"
            " clock held down under load, it is thermally downclocking. The dashed lines"
            " judge the junction and memory only.",
            "celsius",
            queries(
                (over_interval("min", sel(HEADROOM, HOT_SENSORS_MATCHER)), "{{card}} {{sensor}}"),
                (over_interval("min", sel(HEADROOM, OTHER_SENSORS_MATCHER)),
                 "{{card}} {{sensor}}"),
            ),
            thresholds=falling_steps(("red", t.gpu_junction_margin_celsius),
                                     ("orange", t.gpu_hot_margin_celsius), inclusive=True),
            alerts=("RigGpuHot", "RigGpuThermalDownclock"),
            w=24,
        ),
    ])
    held = Section("Clock and power", [
        timeseries(
            "sclk against its max",
            "The shader clock of each card and its maximum (the top pp_dpm_sclk level,"
            " dashed).",
            "hertz",
            queries(
                (sel("rig_gpu_clock_hertz", 'clock="sclk"'), "{{card}}"),
                (sel("rig_gpu_clock_max_hertz", 'clock="sclk"'), "{{card}} max"),
            ),
            overrides=[threshold_override(LIMIT_LINES)],
            alerts=("RigGpuThermalDownclock",),
            w=8,
        ),
        timeseries(
            "sclk share of its max",
            "The shader clock over its maximum. Dashed line: under"
            f" {t.gpu_sclk_ratio:.0%} while busy and near the thermal limit is a thermal"
            " downclock; held there by the power limit, it is power capping.",
            "percentunit",
            queries((over_interval("min", sel(SCLK_RATIO)), "{{card}}")),
            thresholds=falling_steps(("orange", t.gpu_sclk_ratio)),
            alerts=("RigGpuThermalDownclock",),
            min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "Power against its cap",
            "Board power of each card, its power cap (power1_cap, dashed) and the line at"
            f" {t.gpu_power_cap_ratio:.0%} of the cap where the clock counts as held by the"
            " power limit.",
            "watt",
            queries(
                (sel("rig_gpu_power_watts"), "{{card}}"),
                (f"{sel('rig_gpu_power_cap_watts')} * {t.gpu_power_cap_ratio:g}",
                 "{{card}} capped line"),
                (sel("rig_gpu_power_cap_watts"), "{{card}} cap"),
            ),
            overrides=[threshold_override(LIMIT_LINES), threshold_override(".* capped line$")],
            alerts=("RigGpuPowerCapped",),
            w=8,
        ),
        state_timeline(
            "Throttle reasons",
            "The throttle reasons the firmware reports (gpu_metrics throttle_status) that"
            " were set at some time in the range; a card with none set has no row. The"
            " Navi 31 hotspot bit (thermal_junction) is left out, as the rules leave it:"
            " it is set almost always, even at idle (the junction's headroom says more).",
            queries((f"{throttle} and on ({CARD_SERIES}, reason)"
                     f" (max_over_time({throttle}[$__range]) > 0)", "{{card}} {{reason}}")),
            mappings=on_off("off", "throttling"),
            alerts=("RigGpuThermalDownclock", "RigGpuPowerCapped"),
            no_value="no throttle reason set", h=6,
        ),
    ])
    load = Section("Load, memory, fans, PCIe", [
        timeseries(
            "Busy",
            "The share of time the GPU and its memory controller were busy. Dashed line:"
            f" {t.gpu_busy_ratio:.0%}, where the rules count a card as under load.",
            "percentunit",
            queries(
                (sel("rig_gpu_busy_ratio"), "{{card}} GPU"),
                (sel("rig_gpu_memory_busy_ratio"), "{{card}} memory"),
            ),
            thresholds=steps(("blue", t.gpu_busy_ratio)),
            min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "Fan speed",
            "Fan speed of each card (hwmon fan1_input).",
            "rotrpm",
            queries((sel("rig_gpu_fan_rpm"), "{{card}}")),
            w=8,
        ),
        timeseries(
            "PCIe link speed against its max",
            "The current link speed of each card's endpoint and of the switch's upstream"
            " port above it, against each port's maximum (dashed). On RDNA the endpoint can"
            " read its full speed in a slower slot: the upstream port tells.",
            "suffix: GT/s",
            queries(
                (f"{sel(PCIE_SPEED, CURRENT)} / 1e9", "{{card}} {{port}}"),
                (f"{sel(PCIE_SPEED, MAX)} / 1e9", "{{card}} {{port}} max"),
            ),
            overrides=[threshold_override(LIMIT_LINES)],
            alerts=("RigGpuPcieDegraded",),
            w=8,
        ),
    ])
    cards = Section("Cards: memory, links, presence", [
        stat(
            "VRAM used",
            "VRAM in use on each card, the most over the range, against its total.",
            "bytes",
            queries((f"max by (rig, card) (max_over_time({sel('rig_gpu_vram_used_bytes')}"
                     "[$__range]))", "{{card}} used"),
                    (f"max by (rig, card) ({sel('rig_gpu_vram_total_bytes')})", "{{card}} total"),
                    instant=True),
            thresholds=steps(), no_value="no card", w=8,
        ),
        stat(
            "PCIe link width",
            "The narrowest current link of each card's ports over the range, in lanes;"
            f" narrower than x{t.gpu_pcie_min_width_lanes} is degraded.",
            "none",
            queries((f"min by (rig, card) (min_over_time("
                     f"{sel('rig_gpu_pcie_link_width_lanes', CURRENT)}[$__range]))",
                     "{{card}} lanes"), instant=True),
            thresholds=falling_steps(("orange", t.gpu_pcie_min_width_lanes)),
            alerts=("RigGpuPcieDegraded",), no_value="no card", w=8,
        ),
        stat(
            "Cards present",
            "Whether each card was on the bus for the whole range (a card that vanished keeps"
            " its series at 0). Only the cards [gpu] cards selects are read (not the Ryzen"
            " iGPU, by default).",
            "none",
            queries((f"min by (rig, card, pci_bus) (min_over_time({sel('rig_gpu_present')}"
                     "[$__range]))", "{{card}} {{pci_bus}}"), instant=True),
            thresholds=falling_steps(("red", 1)),
            mappings=[{"type": "value", "options": {
                "0": {"text": "missing", "index": 0}, "1": {"text": "present", "index": 1}}}],
            alerts=("RigGpuMissing",), no_value="no card", w=8,
        ),
    ])
    return rig_dashboard(
        "Rig: GPUs",
        UIDS["gpus"],
        "Temperatures against their critical limits, power against its cap, sclk against"
        " its max, throttle reasons, VRAM, busy, fans and PCIe, per card.",
        [temperatures, held, load, cards],
    )


dashboard = build(Thresholds())

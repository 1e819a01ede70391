"""GPU families from a GpuReading.

    rig_gpu_expected_cards 2.0
    rig_gpu_present{card="card1",pci_bus="0000:03:00.0",unique_id="6a3c1f2b9e04d751"} 1.0
    rig_gpu_info{card="card1",device_id="1002:744c",kind="discrete",pci_bus="0000:03:00.0"} 1.0
    rig_gpu_temperature_celsius{card="card1",sensor="junction"} 88.0
    rig_gpu_temperature_limit_celsius{card="card1",limit="critical",sensor="junction"} 110.0
    rig_gpu_power_watts{card="card1"} 339.0
    rig_gpu_clock_hertz{card="card1",clock="sclk"} 2.25e+09
    rig_gpu_pcie_link_width_lanes{card="card1",kind="current",port="upstream"} 16.0
    rig_gpu_throttle_active{card="card1",reason="power"} 1.0

Only the cards `[gpu] cards` selects are here. A card that vanished keeps only
rig_gpu_present 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric

from exporter.daemon.collector.families import counter, families, gauge, non_empty
from exporter.daemon.sources.gpu import GpuReading
from exporter.daemon.sources.gpu_metrics import THROTTLE_REASONS

# (family, help, CardReading attribute) for the one-value-per-card gauges.
_CARD_GAUGES = (
    ("gpu_power_watts", "Socket power (power1_input, else power1_average).", "power_watts"),
    ("gpu_power_cap_watts", "Power limit in force (power1_cap).", "power_cap_watts"),
    ("gpu_power_cap_max_watts", "Highest settable power limit (power1_cap_max).",
     "power_cap_max_watts"),
    ("gpu_busy_ratio", "Graphics engine busy, 0-1 (gpu_busy_percent).", "busy_ratio"),
    ("gpu_memory_busy_ratio", "Memory controller busy, 0-1 (mem_busy_percent).",
     "memory_busy_ratio"),
    ("gpu_vram_used_bytes", "VRAM in use.", "vram_used_bytes"),
    ("gpu_vram_total_bytes", "VRAM size.", "vram_total_bytes"),
    ("gpu_fan_rpm", "Fan speed in revolutions per minute.", "fan_rpm"),
)


@families.register
def _(reading: GpuReading) -> Iterable[Metric]:
    present = gauge("gpu_present", "1 while the card is on the bus; 0 once it has vanished.",
                    ["card", "pci_bus", "unique_id"])
    info = gauge("gpu_info", "A card that is read: its PCI device id and kind "
                 "(discrete, or integrated: an APU's iGPU).",
                 ["card", "pci_bus", "device_id", "kind"])
    temperature = gauge("gpu_temperature_celsius", "Temperature by sensor (hwmon temp*_input).",
                        ["card", "sensor"])
    limit = gauge("gpu_temperature_limit_celsius",
                  "Temperature limits: critical slows the card, emergency shuts it down.",
                  ["card", "sensor", "limit"])
    energy = counter("gpu_energy_joules_total",
                     "Energy used since the exporter started: gpu_metrics energy_accumulator, "
                     "a u32 that wraps every 65,536 J, accumulated across wraps.",
                     ["card"])
    clock = gauge("gpu_clock_hertz", "Current clock (sclk: graphics, mclk: memory controller).",
                  ["card", "clock"])
    clock_max = gauge("gpu_clock_max_hertz", "Top DPM level of the clock (pp_dpm_*).",
                      ["card", "clock"])
    link_speed = gauge("gpu_pcie_link_speed_transfers_per_second",
                       "PCIe link speed; port=upstream is the slot link on RDNA.",
                       ["card", "port", "kind"])
    link_width = gauge("gpu_pcie_link_width_lanes",
                       "PCIe link width; port=upstream is the slot link on RDNA.",
                       ["card", "port", "kind"])
    throttle = gauge("gpu_throttle_active",
                     "1 while the firmware limits the clock for this reason (gpu_metrics "
                     "throttle_status). The junction bit is set almost always on Navi 31.",
                     ["card", "reason"])
    per_card = [gauge(name, doc, ["card"]) for name, doc, _ in _CARD_GAUGES]

    for card in reading.cards:
        present.add_metric([card.card, card.pci_bus, card.unique_id], 1.0 if card.present else 0.0)
        if not card.present:
            continue
        info.add_metric([card.card, card.pci_bus, card.device_id, card.kind], 1.0)
        c = card.card
        for sensor, value in sorted(card.temperatures_celsius.items()):
            temperature.add_metric([c, sensor], value)
        for (sensor, kind), value in sorted(card.temperature_limits_celsius.items()):
            limit.add_metric([c, sensor, kind], value)
        if card.energy_joules is not None:
            energy.add_metric([c], card.energy_joules)
        for name, value in sorted(card.clocks_hertz.items()):
            clock.add_metric([c, name], value)
        for name, value in sorted(card.clock_max_hertz.items()):
            clock_max.add_metric([c, name], value)
        for link in card.pcie_links:
            if link.speed_transfers_per_second is not None:
                link_speed.add_metric([c, link.port, link.kind], link.speed_transfers_per_second)
            if link.width_lanes is not None:
                link_width.add_metric([c, link.port, link.kind], link.width_lanes)
        if card.throttle_reasons is not None:
            for reason in THROTTLE_REASONS:
                throttle.add_metric([c, reason], 1.0 if reason in card.throttle_reasons else 0.0)
        for family, (_, _, attribute) in zip(per_card, _CARD_GAUGES, strict=True):
            value = getattr(card, attribute)
            if value is not None:
                family.add_metric([c], value)

    if reading.expected_cards:
        expected = gauge("gpu_expected_cards", "Cards the rig should have ([gpu] expected_cards).")
        expected.add_metric([], reading.expected_cards)
        yield expected
    yield present
    yield from non_empty(info, temperature, limit, energy, clock, clock_max, link_speed, link_width,
                         throttle, *per_card)

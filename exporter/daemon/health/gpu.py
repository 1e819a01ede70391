"""GPU checks, mirroring alerts/rules/gpu.py, for each card that is read: presence,
thermal downclock, hot, power capped, PCIe; and the number of cards present."""

from __future__ import annotations

import dataclasses

from exporter.daemon.health.report import Signal, Stage
from exporter.daemon.health.view import Context, percent, signal
from exporter.daemon.sources.amdgpu_sysfs import CardReading, PcieLink
from exporter.schema import HOT_SENSORS, THERMAL_DOWNCLOCK_REASONS


def gpu_signals(c: Context) -> list[Signal]:
    gpu = c.view.gpu
    if gpu is None:
        return []  # the gpu source is down or off: exporter_source says which
    out: list[Signal] = []
    for card in gpu.cards:
        labels = {"card": card.card}
        out.append(_present(c, labels, card))
        if not card.present:
            continue  # a vanished card's other series stop (docs/gpu.md#which-cards)
        out += _downclock(c, labels, card)
        out += _hot(c, labels, card)
        out += _power_capped(c, labels, card)
        out += _pcie(c, labels, card)
    if gpu.expected_cards:
        out.append(_count(c, gpu.cards, gpu.expected_cards))
    return out


def _count(c: Context, cards: list[CardReading], expected: int) -> Signal:
    """RigGpuMissing{signal="count"}: fewer cards read than [gpu] expected_cards,
    unless the known cards (vanished ones included) make up the number: a card
    that vanished is gpu_present's, once."""
    read = sum(1 for card in cards if card.present)
    holds = read < expected and len(cards) < expected
    reason = f"{read} of {expected} GPUs read ([gpu] expected_cards)"
    if read < expected and not holds:
        reason += "; the missing ones vanished (gpu_present)"
    elif holds:
        reason += f"; {expected - len(cards)} never seen"
    return signal("gpu_count", {}, "RigGpuMissing",
                  (Stage("critical", c.t.gpu_missing_for_seconds),), holds, read, expected,
                  "cards", reason, "count")


def _present(c: Context, labels: dict[str, str], card: CardReading) -> Signal:
    where = f"{card.card} (PCI {card.pci_bus})"
    return signal("gpu_present", labels, "RigGpuMissing",
                  (Stage("critical", c.t.gpu_missing_for_seconds),), not card.present,
                  1.0 if card.present else 0.0, None, "bool",
                  f"{where} present" if card.present else f"{where} is no longer present",
                  "vanished")


def _junction(card: CardReading) -> str:
    junction = card.temperatures_celsius.get("junction")
    limit = card.temperature_limits_celsius.get(("junction", "critical"))
    if junction is None:
        return "no junction reading"
    return f"junction {junction:.0f} °C" + (f" (limit {limit:.0f} °C)" if limit else "")


def _downclock(c: Context, labels: dict[str, str], card: CardReading) -> list[Signal]:
    t = c.t
    stages = (Stage("warning", t.gpu_downclock_for_seconds),
              Stage("critical", t.gpu_downclock_critical_for_seconds))
    sclk, top = card.clocks_hertz.get("sclk"), card.clock_max_hertz.get("sclk")
    if sclk is None or not top or card.busy_ratio is None:
        return [signal("gpu_thermal_downclock", labels, "RigGpuThermalDownclock", stages, None,
                       None, t.gpu_sclk_ratio, "ratio",
                       f"{card.card}: no sclk, sclk maximum or busy reading")]
    ratio = sclk / top
    junction = card.temperatures_celsius.get("junction")
    limit = card.temperature_limits_celsius.get(("junction", "critical"))
    near_limit = (junction is not None and limit is not None
                  and limit - junction <= t.gpu_junction_margin_celsius)
    thermal = sorted(set(THERMAL_DOWNCLOCK_REASONS) & (card.throttle_reasons or frozenset()))
    holds = (ratio < t.gpu_sclk_ratio and card.busy_ratio >= t.gpu_busy_ratio
             and (near_limit or bool(thermal)))
    reason = (f"{card.card}: sclk at {percent(ratio)} of its maximum, busy "
              f"{percent(card.busy_ratio)}, {_junction(card)}")
    if thermal:
        reason += f", throttling for {', '.join(thermal)}"
    return [signal("gpu_thermal_downclock", labels, "RigGpuThermalDownclock", stages, holds,
                   ratio, t.gpu_sclk_ratio, "ratio", reason)]


def _hot(c: Context, labels: dict[str, str], card: CardReading) -> list[Signal]:
    t = c.t
    out = []
    for sensor in HOT_SENSORS:
        temperature = card.temperatures_celsius.get(sensor)
        limit = card.temperature_limits_celsius.get((sensor, "critical"))
        if temperature is None or limit is None:
            continue
        out.append(signal("gpu_hot", labels, "RigGpuHot",
                          (Stage("warning", t.gpu_hot_for_seconds),),
                          limit - temperature <= t.gpu_hot_margin_celsius, temperature,
                          limit - t.gpu_hot_margin_celsius, "celsius",
                          f"{card.card}: {sensor} {temperature:.0f} °C, critical limit "
                          f"{limit:.0f} °C", sensor))
    # The hotter one relative to its limit speaks for the card when both are fine.
    out.sort(key=lambda s: (s.threshold or 0) - (s.value or 0))
    return out


def _power_capped(c: Context, labels: dict[str, str], card: CardReading) -> list[Signal]:
    t = c.t
    if card.power_watts is None or not card.power_cap_watts:
        return []
    at_cap = card.power_cap_watts * t.gpu_power_cap_ratio
    holds = card.power_watts >= at_cap and "power" in (card.throttle_reasons or frozenset())
    reason = (f"{card.card}: draws {card.power_watts:.0f} W of its {card.power_cap_watts:.0f} W cap"
              + ("; the power limit holds its clock (info: expected on a capped card)"
                 if holds else ""))
    return [signal("gpu_power_capped", labels, "RigGpuPowerCapped",
                   (Stage("info", t.gpu_power_capped_for_seconds),), holds, card.power_watts,
                   at_cap, "watts", reason)]


def _pcie(c: Context, labels: dict[str, str], card: CardReading) -> list[Signal]:
    t = c.t
    stages = (Stage("warning", t.gpu_pcie_for_seconds),)
    busy = card.busy_ratio is not None and card.busy_ratio >= t.gpu_busy_ratio
    links = {(link.port, link.kind): link for link in card.pcie_links}
    out: list[Signal] = []
    ports = []
    for port in sorted({link.port for link in card.pcie_links}):
        now, top = links.get((port, "current")), links.get((port, "max"))
        if now is None or top is None:
            continue
        speed = (now.speed_transfers_per_second, top.speed_transfers_per_second)
        if speed[0] is not None and speed[1] is not None:
            out.append(signal("gpu_pcie", labels, "RigGpuPcieDegraded", stages,
                              speed[0] < speed[1] and busy, speed[0], speed[1], "transfers/s",
                              "", f"speed/{port}"))
        width = (now.width_lanes, top.width_lanes)
        if width[0] is not None and width[1] is not None:
            out.append(signal("gpu_pcie", labels, "RigGpuPcieDegraded", stages,
                              width[0] < width[1] and width[0] < t.gpu_pcie_min_width_lanes
                              and busy, width[0], t.gpu_pcie_min_width_lanes, "lanes",
                              "", f"width/{port}"))
        ports.append(f"{port} {_link(now)} of {_link(top)}")
    # Every port in each line: the slot's x8 shows on the upstream port only.
    busy_text = f" under load (busy {percent(card.busy_ratio)})" if busy and card.busy_ratio \
        else ""
    summary = f"{card.card}: {'; '.join(ports)}{busy_text}"
    return [dataclasses.replace(s, reason=summary) for s in out]


def _link(link: PcieLink) -> str:
    speed = link.speed_transfers_per_second
    width = link.width_lanes
    return (f"x{width:.0f}" if width is not None else "x?") + (
        f" {speed / 1e9:g} GT/s" if speed is not None else "")

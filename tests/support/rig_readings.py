"""Readings of a rig built by hand (cards, engines, host), for the health checks, the
collector, rigctl and the bench, and a monitor on a hand-turned clock."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from exporter.config import EngineConfig
from exporter.daemon.engines.normalise import EngineMetrics
from exporter.daemon.engines.probe import ProbeReading, ProbeResult
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.engines.stall.tracker import StallState
from exporter.daemon.health.monitor import HealthMonitor
from exporter.daemon.health.report import Check, Report
from exporter.daemon.snapshot import Snapshot, SourceResult
from exporter.daemon.sources.amdgpu_sysfs import CardReading, PcieLink
from exporter.daemon.sources.gpu import GpuReading
from exporter.daemon.sources.host import HostReading
from exporter.thresholds import Thresholds

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "exporter" / "daemon" / "health"
                     / "health.schema.json").read_text())
GIB = 1024**3


jsonschema.Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def validate(document: dict) -> None:
    VALIDATOR.validate(document)


def card(name: str = "card1", **changes: object) -> CardReading:
    """A busy, healthy 7900 XTX: 2.25 of 2.304 GHz, junction 88 °C of 110 °C."""
    base = CardReading(
        card=name, pci_bus="0000:03:00.0", unique_id="6a3c1f2b9e04d751",
        temperatures_celsius={"edge": 66.0, "junction": 88.0, "memory": 86.0},
        temperature_limits_celsius={("edge", "critical"): 100.0, ("junction", "critical"): 110.0,
                                    ("memory", "critical"): 108.0},
        power_watts=285.0, power_cap_watts=339.0, power_cap_max_watts=350.0,
        clocks_hertz={"sclk": 2.25e9, "mclk": 1.249e9},
        clock_max_hertz={"sclk": 2.304e9, "mclk": 1.249e9},
        busy_ratio=0.99,
        pcie_links=[PcieLink(port, kind, 16e9, 16) for port in ("endpoint", "upstream")
                    for kind in ("current", "max")],
        throttle_reasons=frozenset(),
    )
    return dataclasses.replace(base, **changes)


def host(**changes: object) -> HostReading:
    """docs/facts/rig.md#kv-capacity: 64 GB, 19 GiB available, 62 MiB of swap, no swap traffic."""
    base = HostReading(
        memory_total_bytes=64 * GIB, memory_available_bytes=19 * GIB,
        swap_total_bytes=8 * GIB, swap_used_bytes=62 * 1024**2,
        swap_in_bytes_total=0.0, swap_out_bytes_total=0.0,
        pressure_stall_seconds_total={"some": 1.25, "full": 0.0},
        cpu_temperatures_celsius={"Tctl": 71.0},
    )
    return dataclasses.replace(base, **changes)


def engine(name: str = "main", stall: float | None = 0.0, tiers: dict | None = None,
           stall_upper: float | None = None, **values: float) -> EngineReading:
    """`stall`: the tracker's longest stall, known exactly unless `stall_upper` is its
    upper bound (then `stall` is the lower)."""
    defaults = {"running_requests": 2.0, "queued_requests": 0.0, "kv_usage_ratio": 0.5,
                "decode_batches_total": 100.0, "prompt_tokens_total": 0.0}
    metrics = EngineMetrics(values={**defaults, **values},
                            tiers={"cache_hit_tokens_total": tiers} if tiers else {})
    upper = stall if stall_upper is None else stall_upper
    state = None if stall is None else StallState(stall, stall, stall, upper, upper)
    return EngineReading("sglang", name, metrics, None, state)


def probe(name: str = "main", success: bool = True, max_gap: float = 0.05,
          reason: str = "") -> ProbeReading:
    result = ProbeResult(success, reason, 0.1, (max_gap,), max_gap, 32, 30.0)
    return ProbeReading("sglang", name, result, (), 0.0)


@dataclass
class Rig:
    """The readings of one snapshot; `down` maps source names to their error."""

    engines: list[EngineReading] = field(default_factory=lambda: [engine()])
    probes: list[ProbeReading] = field(default_factory=list)
    cards: list[CardReading] = field(default_factory=lambda: [card("card1"), card("card2")])
    host: HostReading | None = field(default_factory=host)
    down: dict[str, str] = field(default_factory=dict)
    expected_cards: int = 2  # [gpu] expected_cards

    def snapshot(self) -> Snapshot:
        results = [SourceResult("gpu", GpuReading("sysfs", self.cards, self.expected_cards),
                                0.01)]
        if self.host is not None:
            results.append(SourceResult("host", self.host, 0.01))
        results += [SourceResult(f"engine/{e.name}", e, 0.02) for e in self.engines]
        results += [SourceResult(f"probe/{p.name}", p, 0.0) for p in self.probes]
        results = [r if r.name not in self.down else SourceResult(r.name, None, 0.5,
                                                                  self.down[r.name])
                   for r in results]
        return Snapshot(tuple(results))


class Watch:
    """A HealthMonitor whose clock the test turns."""

    def __init__(self, thresholds: Thresholds | None = None,
                 engines: tuple[str, ...] = ("main",)) -> None:
        self.now = 1000.0
        self.monitor = HealthMonitor(
            thresholds or Thresholds(),
            tuple(EngineConfig(name=n, url=f"http://127.0.0.1:3000{i}")
                  for i, n in enumerate(engines)),
            clock=lambda: self.now, wall_clock=lambda: 1.8e9 + self.now)

    def at(self, now: float, rig: Rig) -> Report:
        report = self._observe(now, rig)
        validate(report.to_json())
        return report

    def _observe(self, now: float, rig: Rig) -> Report:
        self.now = now
        return self.monitor.observe(rig.snapshot())

    def over(self, start: float, end: float, step: float, rig: Rig) -> Report:
        """Observe the same rig every `step` seconds from start to end."""
        t = start
        while t < end:
            self._observe(t, rig)
            t = min(end, t + step)
        return self.at(end, rig)


def checks(report: Report, name: str, /, **labels: str) -> list[Check]:
    return [c for c in report.checks if c.name == name
            and all(c.labels.get(k) == v for k, v in labels.items())]


def one(report: Report, name: str, /, **labels: str) -> Check:
    found = checks(report, name, **labels)
    assert len(found) == 1, (name, labels, report.checks)
    return found[0]


def statuses(report: Report) -> dict[str, str]:
    """Non-ok checks: `name[subject]` -> status."""
    return {f"{c.name}[{c.labels.get('engine') or c.labels.get('card') or ''}]": c.status.value
            for c in report.checks if c.status.value in ("warn", "crit")}

"""rig_gpu_energy_joules_total: the firmware's u32 energy accumulator, wrapped
every 65,536 J, accumulated by the exporter into a counter that only grows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs
from exporter.sim.rig.sysfs_writer import RIG_CARDS, gpu_metrics_v1_3
from tests.support.sysfs_tree import card_device

JOULES_PER_COUNT = 2.0**-16  # 15.259 µJ
WRAP = 2**32


def counts(joules: float) -> int:
    return round(joules / JOULES_PER_COUNT)


class FakeCard:
    """Writes card1's gpu_metrics as a 7900 XTX under a steady load would."""

    def __init__(self, root: Path, watts: float = 339.0, raw: int = WRAP - counts(1000)) -> None:
        self.path = card_device(root, "card1") / "gpu_metrics"
        self.spec = dataclasses.replace(RIG_CARDS[0], power_average_uw=int(watts) * 1_000_000)
        self.watts = watts
        self.raw = raw
        self.clock_ns = 10**12
        self.write()

    def write(self) -> None:
        spec = dataclasses.replace(self.spec, energy_accumulator=self.raw % WRAP,
                                   system_clock_ns=self.clock_ns)
        self.path.write_bytes(gpu_metrics_v1_3(spec))

    def run(self, seconds: float) -> None:
        self.raw += counts(self.watts * seconds)
        self.clock_ns += int(seconds * 1e9)
        self.write()


def energy(reader: AmdgpuSysfs) -> float | None:
    return {c.card: c for c in reader.read_cards()}["card1"].energy_joules


def test_the_counter_grows_through_a_wrap(sysfs_root: Path) -> None:
    card = FakeCard(sysfs_root)  # 1000 J before the u32 wraps
    reader = AmdgpuSysfs(sysfs_root)
    start = energy(reader)
    card.run(15)  # 5085 J: wraps once
    assert energy(reader) - start == pytest.approx(339 * 15, rel=1e-6)


def test_many_scrapes_at_full_power_add_up(sysfs_root: Path) -> None:
    card = FakeCard(sysfs_root)
    reader = AmdgpuSysfs(sysfs_root)
    readings = [energy(reader)]
    for _ in range(40):  # 10 minutes of 15 s scrapes: 203 kJ, three wraps
        card.run(15)
        readings.append(energy(reader))
    assert readings == sorted(readings)
    assert readings[-1] - readings[0] == pytest.approx(339 * 600, rel=1e-6)


def test_a_scrape_gap_longer_than_one_wrap_is_counted_from_the_power(sysfs_root: Path) -> None:
    card = FakeCard(sysfs_root)
    reader = AmdgpuSysfs(sysfs_root)
    start = energy(reader)
    card.run(400)  # 135.6 kJ: the u32 wrapped twice between two reads
    assert energy(reader) - start == pytest.approx(339 * 400, rel=1e-6)


def test_a_counter_that_restarts_adds_only_what_it_counted_since(sysfs_root: Path) -> None:
    card = FakeCard(sysfs_root, raw=counts(50_000))
    reader = AmdgpuSysfs(sysfs_root)
    start = energy(reader)
    card.raw = counts(339 * 15)  # the card was reset: the firmware counts from 0 again
    card.clock_ns += 15 * 10**9
    card.write()
    assert energy(reader) - start == pytest.approx(339 * 15, rel=1e-6)


def test_a_zero_accumulator_is_absent_and_keeps_the_count(sysfs_root: Path) -> None:
    card = FakeCard(sysfs_root)
    reader = AmdgpuSysfs(sysfs_root)
    start = energy(reader)
    saved, card.raw = card.raw, 0  # firmware that does not fill the field
    card.write()
    assert energy(reader) is None
    card.raw = saved
    card.run(15)
    assert energy(reader) - start == pytest.approx(339 * 15, rel=1e-6)


def test_firmware_that_never_fills_it_has_no_energy_series(sysfs_root: Path) -> None:
    FakeCard(sysfs_root, raw=0)
    assert energy(AmdgpuSysfs(sysfs_root)) is None

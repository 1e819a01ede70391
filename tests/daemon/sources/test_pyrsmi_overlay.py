"""The pyrsmi backend: the real loader on this ROCm-less machine, and a fake rocml
with pyrsmi's function names and its -1 / 65535 "not supported" conventions,
shaped like pyrsmi 0.x (no package/ctypes modes; rocm_smi's BDFID packing).
The real pyrsmi 1.1.0 module in both of its modes: test_pyrsmi_modes.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from exporter.daemon.sources.gpu import GpuSource
from exporter.daemon.sources.pyrsmi_overlay import PyrsmiOverlay, bdf_string, load_rocml
from tests.support.sysfs_tree import SYSFS_FIXTURE


def bdf_id(bus: int, device: int = 0, function: int = 0, domain: int = 0) -> int:
    """ROCm's packing of a PCI address (rocm_smi `rsmi_dev_pci_id_get`)."""
    return domain << 32 | bus << 8 | device << 3 | function


class FakeRocml(SimpleNamespace):
    """pyrsmi.rocml's public functions as 1.1.0 answers them on two 7900 XTX cards.

    ROCm enumerates card2 first here, to prove the overlay matches by PCI address.
    """

    def __init__(self, **overrides: object) -> None:
        answers = {
            "smi_get_device_count": lambda: 2,
            "smi_get_device_pci_id": lambda dev: [bdf_id(0x0A), bdf_id(0x03)][dev],
            "smi_get_device_utilization": lambda dev: [55, 42][dev],
            "smi_get_device_memory_busy": lambda dev: [12, 30][dev],
            "smi_get_device_memory_used": lambda dev, type="VRAM": [1000, 2000][dev],
            "smi_get_device_memory_total": lambda dev, type="VRAM": [4000, 5000][dev],
            # gpu_metrics v1.3 has no current_socket_power: 1.1.0 returns 65535.0
            # (docs/facts/amdgpu.md#pyrsmi)
            "smi_get_device_average_power": lambda dev: 65535.0,
            "smi_get_device_fan_rpms": lambda dev: [-1, 1500][dev],  # -1: not supported
        }
        super().__init__(**(answers | overrides))


def read_with(rocml: object) -> dict:
    source = GpuSource(GpuSource.from_backend("sysfs", str(SYSFS_FIXTURE)).sysfs,
                       PyrsmiOverlay(rocml))
    reading = source.read_now()
    assert reading.backend == "pyrsmi+sysfs"
    return {c.card: c for c in reading.cards}


def test_bdf_id_unpacks_to_the_sysfs_address() -> None:
    assert bdf_string(bdf_id(0x0A)) == "0000:0a:00.0"
    assert bdf_string(bdf_id(0x03, 1, 1, 2)) == "0002:03:01.1"


def test_overlay_takes_utilisation_vram_and_fan_from_rocm_by_pci_address() -> None:
    cards = read_with(FakeRocml())
    assert cards["card1"].busy_ratio == 0.42 and cards["card2"].busy_ratio == 0.55
    assert cards["card1"].memory_busy_ratio == 0.30
    assert (cards["card1"].vram_used_bytes, cards["card1"].vram_total_bytes) == (2000, 5000)
    assert cards["card1"].fan_rpm == 1500


def test_not_supported_answers_keep_the_sysfs_value() -> None:
    cards = read_with(FakeRocml())
    assert cards["card2"].fan_rpm == 2240      # pyrsmi said -1
    assert cards["card2"].power_watts == 339.0  # pyrsmi said 65535.0
    assert cards["card1"].power_watts == 287.0


def test_power_from_rocm_when_plausible() -> None:
    cards = read_with(FakeRocml(smi_get_device_average_power=lambda dev: [301.0, 250.0][dev]))
    assert cards["card2"].power_watts == 301.0


def test_library_exceptions_keep_the_sysfs_reading() -> None:
    def broken(dev: int) -> float:
        raise TypeError("'>' not supported between instances of 'str' and 'int'")

    cards = read_with(FakeRocml(smi_get_device_utilization=broken,
                                smi_get_device_average_power=lambda dev: -1))
    assert cards["card1"].busy_ratio == 0.99
    assert cards["card2"].power_watts == 339.0
    # Sysfs-only fields never come from pyrsmi.
    assert cards["card1"].temperatures_celsius["junction"] == 88.0


def test_the_real_loader_without_rocm_logs_one_line_and_returns_none(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    # No ROCm on this machine (or in CI): pyrsmi's own smi_initialize must fail.
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    with caplog.at_level(logging.INFO):
        assert load_rocml() is None
    lines = [r for r in caplog.records if "pyrsmi" in r.getMessage()]
    assert len(lines) == 1
    assert "sysfs alone" in lines[0].getMessage()


def test_auto_backend_without_rocm_still_reads_every_card() -> None:
    reading = GpuSource.from_backend("auto", str(SYSFS_FIXTURE)).read_now()
    assert reading.backend == "sysfs"
    assert [c.card for c in reading.cards] == ["card1", "card2"]

"""The real pyrsmi 1.1.0 `rocml` module, run over fakes of what lies beneath it.

pyrsmi 1.1.0 has two modes (its wheel's `rocml.py`, `smi_initialize`):
- package mode: ROCm's `amdsmi` Python package imports; `rocm_lib` stays None,
  so every call that only has a ctypes path (the fan calls) raises
  AttributeError inside pyrsmi, which logs it with `logging.error` on the root
  logger and returns -1;
- ctypes mode: `libamd_smi.so` through ctypes; `smi_get_device_pci_id` returns
  `amdsmi_bdf_t.as_uint`, whose bit fields are function 3, device 5, bus 8,
  domain 48: the PCI domain starts at bit 16.
The fakes answer like a rig with two 7900 XTX cards; ROCm lists card2 first.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import sys
from types import SimpleNamespace

import pytest

from exporter.daemon.sources.amdgpu_sysfs import CardReading
from exporter.daemon.sources.pyrsmi_overlay import PyrsmiOverlay, load_rocml

rocml = pytest.importorskip("pyrsmi.rocml")
if not hasattr(rocml, "_using_amdsmi_package"):
    pytest.skip("these fakes are shaped like pyrsmi 1.x", allow_module_level=True)

# (domain, bus) per ROCm device index, and what each device reports.
DEVICES = [
    {"domain": 0, "bus": 0x0A, "busy": 55, "umc": 12, "used": 1000, "total": 4000, "rpm": 2240},
    {"domain": 0, "bus": 0x03, "busy": 42, "umc": 30, "used": 2000, "total": 5000, "rpm": 1712},
]


class MemoryType(enum.IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


def fake_amdsmi_package(devices: list[dict]) -> SimpleNamespace:
    """ROCm's `amdsmi` Python package, as pyrsmi 1.1.0 calls it."""
    return SimpleNamespace(
        AmdSmiMemoryType=MemoryType,
        amdsmi_init=lambda *flags: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: list(range(len(devices))),
        amdsmi_get_gpu_device_bdf=lambda h: (
            f"{devices[h]['domain']:04x}:{devices[h]['bus']:02x}:00.0"),
        amdsmi_get_gpu_activity=lambda h: {"gfx_activity": devices[h]["busy"],
                                           "umc_activity": devices[h]["umc"],
                                           "mm_activity": 0},
        amdsmi_get_gpu_memory_usage=lambda h, kind: devices[h]["used"],
        amdsmi_get_gpu_memory_total=lambda h, kind: devices[h]["total"],
        # gpu_metrics v1.3 has no current_socket_power: amdsmi maps it to "N/A".
        amdsmi_get_power_info=lambda h: {"current_socket_power": "N/A",
                                         "average_socket_power": 339, "socket_power": "N/A"},
    )


class FakeLibAmdSmi:
    """libamd_smi.so through ctypes: fills the structs pyrsmi passes by reference."""

    def __init__(self, devices: list[dict]) -> None:
        self.devices = devices

    def amdsmi_get_gpu_device_bdf(self, handle, bdf) -> int:
        fields = bdf._obj.fields
        fields.domain_number = self.devices[handle]["domain"]
        fields.bus_number = self.devices[handle]["bus"]
        fields.device_number, fields.function_number = 0, 0
        return 0

    def amdsmi_get_gpu_activity(self, handle, usage) -> int:
        usage._obj.gfx_activity = self.devices[handle]["busy"]
        usage._obj.umc_activity = self.devices[handle]["umc"]
        return 0

    def amdsmi_get_gpu_memory_usage(self, handle, kind, used) -> int:
        used._obj.value = self.devices[handle]["used"]
        return 0

    def amdsmi_get_gpu_memory_total(self, handle, kind, total) -> int:
        total._obj.value = self.devices[handle]["total"]
        return 0

    def amdsmi_get_power_info(self, handle, info) -> int:
        info._obj.current_socket_power = 0xFFFF  # not filled on RDNA3: all-ones
        info._obj.average_socket_power = 339
        return 0

    def amdsmi_get_gpu_fan_rpms(self, handle, index, rpms) -> int:
        rpms._obj.value = self.devices[handle]["rpm"]
        return 0


def cards(*buses: str) -> list[CardReading]:
    return [CardReading(f"card{i + 1}", bus, "") for i, bus in enumerate(buses)]


@pytest.fixture
def fresh_rocml(monkeypatch: pytest.MonkeyPatch):
    """pyrsmi's module state as right after import, restored after the test."""
    for name, value in (("rocm_lib", None), ("_processor_handles", []),
                        ("_handle_initialized", False), ("_using_amdsmi_package", False),
                        ("_rocm_lib_refcount", 0)):
        monkeypatch.setattr(rocml, name, value)
    return rocml


@pytest.fixture
def package_mode(fresh_rocml, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi_package(DEVICES))
    loaded = load_rocml()
    assert loaded is rocml and rocml._using_amdsmi_package and rocml.rocm_lib is None
    return loaded


def ctypes_mode(fresh_rocml, monkeypatch: pytest.MonkeyPatch, devices: list[dict]):
    monkeypatch.setattr(rocml, "rocm_lib", FakeLibAmdSmi(devices))
    monkeypatch.setattr(rocml, "_processor_handles", list(range(len(devices))))
    monkeypatch.setattr(rocml, "_handle_initialized", True)
    return fresh_rocml


def pyrsmi_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "pyrsmi" in r.pathname]


class TestPackageMode:
    def test_readings_come_through_by_pci_address(self, package_mode) -> None:
        card1, card2 = cards("0000:03:00.0", "0000:0a:00.0")
        overlay = PyrsmiOverlay(package_mode)
        for card in (card1, card2):
            overlay.apply(card)
        assert (card1.busy_ratio, card2.busy_ratio) == (0.42, 0.55)
        assert (card1.vram_used_bytes, card1.vram_total_bytes) == (2000, 5000)
        # pyrsmi compares "N/A" > 0, catches the TypeError and answers -1: the
        # sysfs power (absent in this bare reading) is kept.
        assert card1.power_watts is None

    def test_the_fan_error_is_contained_and_told_once(
        self, package_mode, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.DEBUG):
            overlay = PyrsmiOverlay(package_mode)
            for _ in range(5):  # five scrapes of two cards
                for card in cards("0000:03:00.0", "0000:0a:00.0"):
                    overlay.apply(card)
                    assert card.fan_rpm is None  # no fan from pyrsmi: sysfs keeps its own
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert [r for r in pyrsmi_records(caplog) if r.levelno >= logging.WARNING] == []
        told = [r for r in caplog.records if "fan" in r.getMessage()
                and r.name.startswith("exporter")]
        assert len(told) == 1, [r.getMessage() for r in told]

    def test_pyrsmi_errors_on_the_root_logger_reach_no_handler(
        self, package_mode, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Any other call that fails inside pyrsmi logs at ERROR the same way.
        monkeypatch.setattr(sys.modules["amdsmi"], "amdsmi_get_gpu_activity", None)
        monkeypatch.setattr(rocml, "_get_processor_handle", lambda dev: 1 / 0)
        overlay = PyrsmiOverlay(package_mode)
        with caplog.at_level(logging.DEBUG):
            for _ in range(3):
                card = cards("0000:03:00.0")[0]
                overlay.apply(card)
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        told = [r.getMessage() for r in caplog.records if r.name.startswith("exporter")
                and "division by zero" in r.getMessage()]
        assert 1 <= len(told) <= 8  # once per pyrsmi function, not once per card per scrape


class TestCtypesMode:
    def test_bdf_domain_is_read_from_bit_16(
        self, fresh_rocml, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        devices = [dict(DEVICES[0], domain=0x0001), dict(DEVICES[1], domain=0x0002)]
        loaded = ctypes_mode(fresh_rocml, monkeypatch, devices)
        assert loaded.smi_get_device_pci_id(0) == 0x0001 << 16 | 0x0A << 8  # the real packing
        card1, card2 = cards("0002:03:00.0", "0001:0a:00.0")
        overlay = PyrsmiOverlay(loaded)
        for card in (card1, card2):
            overlay.apply(card)
        assert (card1.busy_ratio, card2.busy_ratio) == (0.42, 0.55)
        assert (card1.fan_rpm, card2.fan_rpm) == (1712, 2240)

    def test_a_card_on_another_domain_gets_nothing_from_rocm(
        self, fresh_rocml, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        loaded = ctypes_mode(fresh_rocml, monkeypatch, DEVICES)
        card = cards("0001:03:00.0")[0]
        PyrsmiOverlay(loaded).apply(card)
        assert card.busy_ratio is None

    def test_rdna3_power_of_65535_watts_keeps_the_sysfs_value(
        self, fresh_rocml, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        loaded = ctypes_mode(fresh_rocml, monkeypatch, DEVICES)
        assert loaded.smi_get_device_average_power(1) == 65535.0
        card = cards("0000:03:00.0")[0]
        card.power_watts = 287.0
        PyrsmiOverlay(loaded).apply(card)
        assert card.power_watts == 287.0


def test_ctypes_bdf_layout_matches_the_wheel() -> None:
    bdf = rocml.amdsmi_bdf_t()
    bdf.fields.domain_number, bdf.fields.bus_number = 0x1234, 0xC1
    bdf.fields.device_number, bdf.fields.function_number = 0x1F, 0x7
    assert bdf.as_uint == 0x1234 << 16 | 0xC1 << 8 | 0x1F << 3 | 0x7
    assert ctypes.sizeof(bdf) == 8

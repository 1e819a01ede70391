"""Overlay pyrsmi's readings on the sysfs ones, where ROCm's library loads.

pyrsmi has only utilisation, VRAM, power and fan (reference/amd-gpu.md §3.3).
Its "not supported" answers are -1, and 65535 W for power on RDNA3 with
pyrsmi 1.1.0 (gpu_metrics v1.3 has no current_socket_power, §3.5): those keep
the sysfs value. Any exception from the library keeps the sysfs value too.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from exporter.sources.amdgpu_sysfs import CardReading

log = logging.getLogger(__name__)

# pyrsmi 1.1.0 reports 65535 W when the socket-power field is left at all-ones.
_POWER_NOT_AVAILABLE = 65535.0


def load_rocml(required: bool = False) -> ModuleType | None:
    """Import pyrsmi and initialise ROCm SMI, or log one line and return None.

    `required` (backend = "pyrsmi") makes that line a warning: the owner asked for it.
    """
    try:
        from pyrsmi import rocml

        rocml.smi_initialize()
    except Exception as exc:  # pyrsmi raises RuntimeError, KeyError, AttributeError, its own
        log.log(logging.WARNING if required else logging.INFO,
                "pyrsmi unavailable, reading GPUs from sysfs alone: %s: %s",
                type(exc).__name__, exc)
        return None
    log.info("pyrsmi loaded: utilisation, VRAM, power and fan come from ROCm SMI")
    return rocml


def bdf_string(bdf_id: int) -> str:
    """ROCm's 64-bit BDF id -> the sysfs PCI address, e.g. 0000:03:00.0."""
    domain, bus = bdf_id >> 32 & 0xFFFFFFFF, bdf_id >> 8 & 0xFF
    device, function = bdf_id >> 3 & 0x1F, bdf_id & 0x7
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


class PyrsmiOverlay:
    def __init__(self, rocml: Any) -> None:
        self.rocml = rocml
        self._devices: dict[str, int] = {}

    def apply(self, card: CardReading) -> None:
        device = self._device_index(card.pci_bus)
        if device is None:
            return
        busy = self._call("smi_get_device_utilization", device)
        if busy is not None and 0 <= busy <= 100:
            card.busy_ratio = busy / 100
        memory_busy = self._call("smi_get_device_memory_busy", device)
        if memory_busy is not None and 0 <= memory_busy <= 100:
            card.memory_busy_ratio = memory_busy / 100
        used = self._call("smi_get_device_memory_used", device)
        if used is not None and used >= 0:
            card.vram_used_bytes = float(used)
        total = self._call("smi_get_device_memory_total", device)
        if total is not None and total > 0:
            card.vram_total_bytes = float(total)
        power = self._call("smi_get_device_average_power", device)
        if power is not None and 0 <= power < _POWER_NOT_AVAILABLE:
            card.power_watts = float(power)
        fan = self._call("smi_get_device_fan_rpms", device)
        if fan is not None and fan >= 0:
            card.fan_rpm = float(fan)

    def _device_index(self, pci_bus: str) -> int | None:
        if pci_bus not in self._devices:
            # Device indices follow ROCm's enumeration, not the DRM card number.
            count = self._call("smi_get_device_count") or 0
            for index in range(int(count)):
                bdf = self._call("smi_get_device_pci_id", index)
                if bdf is not None and bdf >= 0:
                    self._devices[bdf_string(int(bdf))] = index
        return self._devices.get(pci_bus)

    def _call(self, function: str, *args: int) -> float | None:
        try:
            value = getattr(self.rocml, function)(*args)
        except Exception as exc:  # pyrsmi's defects raise TypeError/AttributeError (§3.5)
            log.debug("pyrsmi %s%s failed: %s", function, args, exc)
            return None
        return value if isinstance(value, int | float) else None

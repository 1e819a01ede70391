"""Overlay pyrsmi's readings on the sysfs ones, where ROCm's library loads.

pyrsmi has only utilisation, VRAM, power and fan (docs/facts/amdgpu.md#pyrsmi).
Its "not supported" answers are -1, and 65535 W for power on RDNA3 with
pyrsmi 1.1.0 (gpu_metrics v1.3 has no current_socket_power): those keep
the sysfs value. Any exception from the library keeps the sysfs value too.

pyrsmi 1.1.0 runs in one of two modes (its `smi_initialize`): through ROCm's
`amdsmi` Python package when that imports ("package mode"), else through
`libamd_smi.so` with ctypes. Its fan calls exist only in ctypes mode, and it
reports every failure with `logging.error` on the root logger: left alone,
one ERROR line per card per scrape. `PyrsmiLogGate` keeps its log lines from
the handlers and tells each kind once through this module's logger.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from exporter.daemon.sources.amdgpu_sysfs import CardReading

log = logging.getLogger(__name__)

# pyrsmi 1.1.0 reports 65535 W when the socket-power field is left at all-ones.
_POWER_NOT_AVAILABLE = 65535.0


def load_rocml(required: bool = False) -> ModuleType | None:
    """Import pyrsmi and initialise ROCm SMI, or log one line and return None.

    `required` (backend = "pyrsmi") makes that line a warning: the owner asked for it.
    """
    try:
        from pyrsmi import rocml

        with PyrsmiLogGate(rocml).muted():
            rocml.smi_initialize()
    except Exception as exc:  # pyrsmi raises RuntimeError, KeyError, AttributeError, its own
        log.log(logging.WARNING if required else logging.INFO,
                "pyrsmi unavailable, reading GPUs from sysfs alone: %s: %s",
                type(exc).__name__, exc)
        return None
    mode = "amdsmi package" if package_mode(rocml) else "ctypes"
    log.info("pyrsmi loaded (%s mode): utilisation, VRAM, power and fan come from ROCm SMI",
             mode)
    return rocml


def package_mode(rocml: Any) -> bool:
    """pyrsmi 1.x went through ROCm's `amdsmi` Python package, not ctypes."""
    return bool(getattr(rocml, "_using_amdsmi_package", False))


def bdf_string(bdf_id: int, domain_bit: int = 32) -> str:
    """A numeric PCI address -> the sysfs form, e.g. 0000:03:00.0.

    Function 3 bits, device 5, bus 8 from bit 8, then the domain: at bit 32 in
    rocm_smi's BDFID and in pyrsmi's own packing of the amdsmi package's answer,
    at bit 16 in ctypes mode, where pyrsmi returns `amdsmi_bdf_t.as_uint`
    (bit fields 3/5/8/48, pyrsmi 1.1.0 `rocml.py`).
    """
    domain, bus = bdf_id >> domain_bit & 0xFFFFFFFF, bdf_id >> 8 & 0xFF
    device, function = bdf_id >> 3 & 0x1F, bdf_id & 0x7
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def _domain_bit(rocml: Any) -> int:
    if hasattr(rocml, "_using_amdsmi_package") and not package_mode(rocml):
        return 16  # pyrsmi 1.x in ctypes mode
    return 32  # pyrsmi 1.x package mode, or 0.x (librocm_smi64's BDFID)


class PyrsmiLogGate(logging.Filter):
    """Keeps pyrsmi's root-logger lines from every handler; tells each kind once.

    A root-logger filter sees only records logged on the root logger itself,
    which pyrsmi does (`logging.error(...)`); this exporter's own loggers are
    named and pass by it untouched.
    """

    def __init__(self, rocml: Any) -> None:
        super().__init__()
        where = getattr(rocml, "__file__", None)
        self._directory = os.path.dirname(os.path.abspath(where)) if where else None
        self._told: set[tuple[str, int]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if os.path.dirname(record.pathname) != self._directory:
            return True
        key = (record.funcName, record.levelno)
        if key not in self._told:
            self._told.add(key)
            log.log(min(record.levelno, logging.WARNING),
                    "pyrsmi %s: %s (pyrsmi's own log lines are muted; told once)",
                    record.funcName, record.getMessage())
        return False

    @contextmanager
    def muted(self) -> Iterator[None]:
        root = logging.getLogger()
        root.addFilter(self)
        try:
            yield
        finally:
            root.removeFilter(self)


class PyrsmiOverlay:
    def __init__(self, rocml: Any) -> None:
        self.rocml = rocml
        self._devices: dict[str, int] = {}
        self._domain_bit = _domain_bit(rocml)
        self._gate = PyrsmiLogGate(rocml)
        # In package mode pyrsmi's `rocm_lib` stays None and its fan calls
        # always fail (pyrsmi 1.1.0): do not ask.
        self._fan = not package_mode(rocml)
        if not self._fan:
            log.info("pyrsmi in amdsmi package mode has no fan call; fan speed comes from sysfs")

    def apply(self, card: CardReading) -> None:
        with self._gate.muted():
            self._apply(card)

    def _apply(self, card: CardReading) -> None:
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
        fan = self._call("smi_get_device_fan_rpms", device) if self._fan else None
        if fan is not None and fan >= 0:
            card.fan_rpm = float(fan)

    def _device_index(self, pci_bus: str) -> int | None:
        if pci_bus not in self._devices:
            # Device indices follow ROCm's enumeration, not the DRM card number.
            count = self._call("smi_get_device_count") or 0
            for index in range(int(count)):
                bdf = self._call("smi_get_device_pci_id", index)
                if bdf is not None and bdf >= 0:
                    self._devices[bdf_string(int(bdf), self._domain_bit)] = index
        return self._devices.get(pci_bus)

    def _call(self, function: str, *args: int) -> float | None:
        try:
            value = getattr(self.rocml, function)(*args)
        except Exception as exc:  # pyrsmi's defects raise TypeError, AttributeError
            log.debug("pyrsmi %s%s failed: %s", function, args, exc)
            return None
        return value if isinstance(value, int | float) else None

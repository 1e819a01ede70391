"""The host source: RAM, swap, memory pressure and CPU temperature.

The HiCache L2 pool takes most of the rig's RAM (≈40 GB of 64 GB, docs/facts/rig.md#kv-capacity),
so swap traffic and memory-pressure stalls are the early signs of trouble.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from exporter.snapshot import SourceError
from exporter.sources.blocking import BlockingRead

log = logging.getLogger(__name__)

# Chips whose sensors are the CPU's own, best first: k10temp is Ryzen's (Tctl, Tccd*).
CPU_SENSOR_CHIPS = ("k10temp", "zenpower", "coretemp", "cpu_thermal")


@dataclass
class HostReading:
    memory_total_bytes: float
    memory_available_bytes: float
    swap_total_bytes: float
    swap_used_bytes: float
    swap_in_bytes_total: float
    swap_out_bytes_total: float
    # kind ("some", "full") -> seconds; empty on kernels without PSI.
    pressure_stall_seconds_total: dict[str, float] = field(default_factory=dict)
    cpu_temperatures_celsius: dict[str, float] = field(default_factory=dict)


class HostSource:
    name = "host"

    def __init__(self, proc_root: str = "/proc", sysfs_root: str = "/sys") -> None:
        self.proc_root = Path(proc_root)
        # CPU temperatures come from hwmon under the same sysfs root as the GPUs,
        # so a simulated rig (or a fixture tree) supplies them like the cards.
        self.sysfs_root = Path(sysfs_root)
        self._psi_missing_logged = False
        self._read = BlockingRead(self.read_now, f"host read under {proc_root}")

    async def read(self) -> HostReading:
        return await self._read()

    def read_now(self) -> HostReading:
        # psutil reads meminfo and vmstat under its module-wide PROCFS_PATH, so a
        # fixture tree works too; restore it for the process's other psutil calls.
        saved, psutil.PROCFS_PATH = psutil.PROCFS_PATH, str(self.proc_root)
        try:
            memory = psutil.virtual_memory()
            swap = psutil.swap_memory()
        except (OSError, ValueError, KeyError) as exc:
            raise SourceError(f"cannot read memory from {self.proc_root}: {exc}") from exc
        finally:
            psutil.PROCFS_PATH = saved
        return HostReading(
            memory_total_bytes=float(memory.total),
            memory_available_bytes=float(memory.available),
            swap_total_bytes=float(swap.total),
            swap_used_bytes=float(swap.used),
            swap_in_bytes_total=float(swap.sin),
            swap_out_bytes_total=float(swap.sout),
            pressure_stall_seconds_total=self._memory_pressure(),
            cpu_temperatures_celsius=cpu_temperatures(self.sysfs_root),
        )

    def _memory_pressure(self) -> dict[str, float]:
        """`/proc/pressure/memory`: `some avg10=0.00 avg60=0.00 avg300=0.00 total=<us>`."""
        path = self.proc_root / "pressure" / "memory"
        try:
            text = path.read_text()
        except OSError as exc:
            if not self._psi_missing_logged:
                self._psi_missing_logged = True
                log.info("no memory pressure (PSI) at %s: %s", path, exc.strerror)
            return {}
        stalls = {}
        for line in text.splitlines():
            kind, _, fields = line.partition(" ")
            values = dict(f.split("=", 1) for f in fields.split() if "=" in f)
            if kind in ("some", "full") and values.get("total", "").isdigit():
                stalls[kind] = int(values["total"]) / 1e6
        return stalls


def cpu_temperatures(sysfs_root: Path = Path("/sys")) -> dict[str, float]:
    """The best CPU chip's sensors under `class/hwmon`, by label, in °C.

    hwmon ABI (Documentation/hwmon/sysfs-interface.rst): `name` is the chip,
    `tempN_input` millidegrees, `tempN_label` the sensor (k10temp: Tctl, Tccd1).
    The same files psutil.sensors_temperatures reads, but under a chosen root.
    """
    chips: dict[str, Path] = {}
    for hwmon in sorted((sysfs_root / "class" / "hwmon").glob("hwmon*")):
        try:
            chips.setdefault((hwmon / "name").read_text().strip(), hwmon)
        except OSError:
            continue
    for chip in CPU_SENSOR_CHIPS:
        if chip in chips:
            return _chip_temperatures(chip, chips[chip])
    return {}


def _chip_temperatures(chip: str, hwmon: Path) -> dict[str, float]:
    temperatures = {}
    inputs = sorted(hwmon.glob("temp*_input"), key=lambda p: int(p.name[4:-6] or 0))
    for index, path in enumerate(inputs):
        try:
            millidegrees = int(path.read_text())
        except (OSError, ValueError):
            continue  # a sensor that fails to read (EIO on some boards) is absent
        label_path = path.with_name(path.name.replace("_input", "_label"))
        try:
            label = label_path.read_text().strip()
        except OSError:
            label = ""
        temperatures[label or f"{chip}{index}"] = millidegrees / 1000
    return temperatures

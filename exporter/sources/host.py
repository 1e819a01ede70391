"""The host source: RAM, swap, memory pressure and CPU temperature.

The HiCache L2 pool takes most of the rig's RAM (≈40 GB of 64 GB, rig-facts.md),
so swap traffic and memory-pressure stalls are the early signs of trouble.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from exporter.sources.base import BlockingRead, SourceError

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

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = Path(proc_root)
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
            cpu_temperatures_celsius=cpu_temperatures(),
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


def cpu_temperatures() -> dict[str, float]:
    sensors_temperatures = getattr(psutil, "sensors_temperatures", None)
    if sensors_temperatures is None:  # not on every platform
        return {}
    try:
        chips = sensors_temperatures()
    except OSError:
        return {}
    for chip in CPU_SENSOR_CHIPS:
        if chips.get(chip):
            return {
                entry.label or f"{chip}{index}": float(entry.current)
                for index, entry in enumerate(chips[chip])
            }
    return {}

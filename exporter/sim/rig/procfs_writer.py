"""Write the host files the host source reads, for the simulated rig and tests.

Formats: proc(5) for meminfo and vmstat (pswpin/pswpout count pages of the host's
size, as the host source reads them), the kernel's PSI doc for pressure/memory (total in µs), and
the hwmon ABI for the CPU's k10temp chip (`name`, `tempN_input` in m°C,
`tempN_label`). Every file is replaced whole (write, then rename), so a reader
never sees half a file while a scenario rewrites it, and only when its text changes:
on ext4 a rename over a file forces the new one's data out (`auto_da_alloc`), which at
every tick of many simulated rigs cost their event loop a third of its time
(docs/testing.md#what-each-run-costs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from exporter.daemon.sources.host import PAGE_BYTES

KIB = 1024
MIB = 1024**2
GIB = 1024**3
PAGE = PAGE_BYTES


@dataclass(frozen=True)
class HostSpec:
    # 64 GB host, 40 GiB used and 19 GiB available with HiCache L2 filled
    # (docs/facts/rig.md#kv-capacity).
    memory_total_bytes: int = 64 * GIB
    memory_available_bytes: int = 19 * GIB
    swap_total_bytes: int = 8 * GIB
    swap_used_bytes: int = 62 * 1024 * KIB
    swap_in_pages: int = 0
    swap_out_pages: int = 0
    pressure_some_us: int | None = 1_250_000
    pressure_full_us: int | None = 0


def write_proc(root: Path, spec: HostSpec) -> None:
    root.mkdir(parents=True, exist_ok=True)
    free = spec.memory_available_bytes // 2
    meminfo = {
        "MemTotal": spec.memory_total_bytes,
        "MemFree": free,
        "MemAvailable": spec.memory_available_bytes,
        "Buffers": 512 * 1024 * KIB,
        "Cached": spec.memory_available_bytes - free,
        "Active": spec.memory_total_bytes // 2,
        "Inactive": spec.memory_total_bytes // 4,
        "Shmem": 0,
        "SReclaimable": 0,
        "SwapTotal": spec.swap_total_bytes,
        "SwapFree": spec.swap_total_bytes - spec.swap_used_bytes,
    }
    replace_text(root / "meminfo",
                 "".join(f"{key}:{value // KIB:>16} kB\n" for key, value in meminfo.items()))
    replace_text(root / "vmstat", f"pswpin {spec.swap_in_pages}\npswpout {spec.swap_out_pages}\n")
    pressure = root / "pressure"
    if spec.pressure_some_us is None:
        return
    pressure.mkdir(exist_ok=True)
    replace_text(pressure / "memory",
                 f"some avg10=0.00 avg60=0.00 avg300=0.00 total={spec.pressure_some_us}\n"
                 f"full avg10=0.00 avg60=0.00 avg300=0.00 total={spec.pressure_full_us or 0}\n")


def write_cpu_hwmon(sysfs_root: Path, tctl_celsius: float | None,
                    hwmon: str = "hwmon2") -> None:
    """Ryzen's k10temp chip under `class/hwmon`; None removes its reading (no sensor)."""
    chip = sysfs_root / "class" / "hwmon" / hwmon
    chip.mkdir(parents=True, exist_ok=True)
    replace_text(chip / "name", "k10temp\n")
    replace_text(chip / "temp1_label", "Tctl\n")
    if tctl_celsius is None:
        (chip / "temp1_input").unlink(missing_ok=True)
    else:
        replace_text(chip / "temp1_input", f"{round(tctl_celsius * 1000)}\n")


def replace_text(path: Path, text: str) -> None:
    if same_text(path, text):
        return
    staging = path.with_name(f".{path.name}.new")
    staging.write_text(text)
    os.replace(staging, path)


def same_text(path: Path, text: str) -> bool:
    """The file holds `text` already."""
    try:
        return path.read_text() == text
    except (FileNotFoundError, UnicodeDecodeError):
        return False

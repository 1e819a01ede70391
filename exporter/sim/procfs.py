"""Write the few /proc files the host source reads, for the simulated rig and tests.

Formats: proc(5) for meminfo and vmstat (pswpin/pswpout count 4 KiB pages, as
psutil reads them), and the kernel's PSI doc for pressure/memory (total in µs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KIB = 1024
GIB = 1024**3
PAGE = 4 * KIB


@dataclass(frozen=True)
class HostSpec:
    # rig-facts: 64 GB host, 40 GiB used and 19 GiB available with HiCache L2 filled.
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
    (root / "meminfo").write_text(
        "".join(f"{key}:{value // KIB:>16} kB\n" for key, value in meminfo.items())
    )
    (root / "vmstat").write_text(f"pswpin {spec.swap_in_pages}\npswpout {spec.swap_out_pages}\n")
    pressure = root / "pressure"
    if spec.pressure_some_us is None:
        return
    pressure.mkdir(exist_ok=True)
    (pressure / "memory").write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={spec.pressure_some_us}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={spec.pressure_full_us or 0}\n"
    )

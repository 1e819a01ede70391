"""The host source: RAM, swap, memory pressure and CPU temperature.

The HiCache L2 pool takes most of the rig's RAM (≈40 GB of 64 GB, docs/facts/rig.md#kv-capacity),
so swap traffic and memory-pressure stalls are the early signs of trouble.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from exporter.process.log_limits import Conditions
from exporter.snapshot import SourceError
from exporter.sources.blocking import BlockingRead
from exporter.sources.files import read_capped

log = logging.getLogger(__name__)

# Chips whose sensors are the CPU's own, best first: k10temp is Ryzen's (Tctl, Tccd*).
CPU_SENSOR_CHIPS = ("k10temp", "zenpower", "coretemp", "cpu_thermal")
# proc(5): /proc/vmstat's pswpin and pswpout count pages.
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# The meminfo fields without which the source has nothing to say (kB, proc(5));
# MemAvailable since Linux 3.14.
_MEMINFO_NEEDED = ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree")
_PSI_KINDS = ("some", "full")


@dataclass
class HostReading:
    memory_total_bytes: float
    memory_available_bytes: float
    swap_total_bytes: float
    swap_used_bytes: float
    # None: /proc/vmstat has no such line (a kernel without swap support).
    swap_in_bytes_total: float | None
    swap_out_bytes_total: float | None
    # kind ("some", "full") -> seconds; empty on kernels without PSI, and a kind
    # whose line does not parse is absent.
    pressure_stall_seconds_total: dict[str, float] = field(default_factory=dict)
    cpu_temperatures_celsius: dict[str, float] = field(default_factory=dict)


class HostSource:
    name = "host"

    def __init__(self, proc_root: str = "/proc", sysfs_root: str = "/sys") -> None:
        self.proc_root = Path(proc_root)
        # CPU temperatures come from hwmon under the same sysfs root as the GPUs,
        # so a simulated rig (or a fixture tree) supplies them like the cards.
        self.sysfs_root = Path(sysfs_root)
        # Subjects: a file, or one line of it ("/proc/pressure/memory some").
        self._conditions = Conditions(log, up="{subject}: reads again")
        self._psi_missing_logged = False
        self._read = BlockingRead(self.read_now, f"host read under {proc_root}")

    async def read(self) -> HostReading:
        return await self._read()

    def read_now(self) -> HostReading:
        # Each file and line on its own: one bad line costs its own series only.
        meminfo = self._fields("meminfo", separator=":")
        missing = [key for key in _MEMINFO_NEEDED if key not in meminfo]
        if missing:
            raise SourceError(f"no {', '.join(missing)} in {self.proc_root / 'meminfo'}")
        vmstat = self._fields("vmstat", separator=" ")
        kib = {key: meminfo[key] * 1024 for key in _MEMINFO_NEEDED}
        return HostReading(
            memory_total_bytes=kib["MemTotal"],
            memory_available_bytes=kib["MemAvailable"],
            swap_total_bytes=kib["SwapTotal"],
            swap_used_bytes=kib["SwapTotal"] - kib["SwapFree"],
            swap_in_bytes_total=_pages(vmstat.get("pswpin")),
            swap_out_bytes_total=_pages(vmstat.get("pswpout")),
            pressure_stall_seconds_total=self._memory_pressure(),
            cpu_temperatures_celsius=cpu_temperatures(self.sysfs_root),
        )

    def _fields(self, name: str, separator: str) -> dict[str, float]:
        """`key<separator> value [kB]` lines of a /proc file; a line that does not
        parse is left out and told. A file that cannot be read is a SourceError."""
        path = self.proc_root / name
        try:
            blob = read_capped(path)
        except OSError as exc:
            raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from exc
        fields: dict[str, float] = {}
        bad = []
        for number, raw in enumerate(blob.splitlines(), 1):
            key, sep, rest = raw.partition(separator.encode())
            value = rest.split()[:1]
            if sep and value and value[0].isdigit() and key.isascii():
                fields[key.decode().strip()] = float(value[0])
            else:
                bad.append(f"line {number} {raw[:40]!r}")
        if bad:
            self._conditions.failed(str(path), f"{len(bad)} line(s) not understood, "
                                               f"skipped: first {bad[0]}")
        else:
            self._conditions.ok(str(path))
        return fields

    def _memory_pressure(self) -> dict[str, float]:
        """`/proc/pressure/memory`: `some avg10=0.00 avg60=0.00 avg300=0.00 total=<us>`,
        then the same for `full`, each line read on its own."""
        path = self.proc_root / "pressure" / "memory"
        try:
            blob = read_capped(path)
        except FileNotFoundError:
            if not self._psi_missing_logged:  # a fact about the kernel, not a failure
                self._psi_missing_logged = True
                log.info("no memory pressure (PSI) at %s: the kernel has none, or it is "
                         "off (psi=0)", path)
            return {}
        except OSError as exc:
            self._conditions.failed(str(path), exc.strerror or str(exc))
            return {}
        self._conditions.ok(str(path))
        lines = {raw.partition(b" ")[0]: raw for raw in blob.splitlines()}
        stalls = {}
        for kind in _PSI_KINDS:
            subject = f"{path} {kind}"
            raw = lines.get(kind.encode())
            seconds = _psi_total(raw) if raw is not None else None
            if seconds is None:
                shown = "no such line" if raw is None else f"not understood: {raw[:80]!r}"
                self._conditions.failed(subject, f"{shown}; rig_host_memory_pressure_stall_"
                                                 f"seconds_total{{kind=\"{kind}\"}} is absent")
            else:
                self._conditions.ok(subject)
                stalls[kind] = seconds
        return stalls


def _pages(count: float | None) -> float | None:
    return None if count is None else count * PAGE_BYTES


def _psi_total(line: bytes) -> float | None:
    """The `total=` microseconds of one PSI line, in seconds; None if it has none."""
    for item in line.split()[1:]:
        key, _, value = item.partition(b"=")
        if key == b"total":
            return int(value) / 1e6 if value.isdigit() else None
    return None


def cpu_temperatures(sysfs_root: Path = Path("/sys")) -> dict[str, float]:
    """The best CPU chip's sensors under `class/hwmon`, by label, in °C.

    hwmon ABI (Documentation/hwmon/sysfs-interface.rst): `name` is the chip,
    `tempN_input` millidegrees, `tempN_label` the sensor (k10temp: Tctl, Tccd1).
    The same files psutil.sensors_temperatures reads, but under a chosen root, and
    each read capped (exporter/sources/files.py).
    """
    chips: dict[str, Path] = {}
    for hwmon in sorted((sysfs_root / "class" / "hwmon").glob("hwmon*")):
        try:
            chips.setdefault(read_capped(hwmon / "name").decode("ascii").strip(), hwmon)
        except (OSError, UnicodeDecodeError):
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
            millidegrees = int(read_capped(path))
        except (OSError, ValueError):
            continue  # a sensor that fails to read (EIO on some boards) is absent
        label_path = path.with_name(path.name.replace("_input", "_label"))
        try:
            label = read_capped(label_path).decode("ascii").strip()
        except (OSError, UnicodeDecodeError):
            label = ""
        temperatures[label or f"{chip}{index}"] = millidegrees / 1000
    return temperatures

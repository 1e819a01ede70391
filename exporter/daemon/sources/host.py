"""The host source: RAM, swap, memory pressure and CPU temperature.

The HiCache L2 pool takes most of the rig's RAM (≈40 GB of 64 GB, docs/facts/rig.md#kv-capacity),
so swap traffic and memory-pressure stalls are the early signs of trouble.

RAM and swap come from psutil (`virtual_memory`, `swap_memory`: /proc/meminfo and
/proc/vmstat). What psutil cannot give is read here by hand: it has no PSI at all, and
its `sensors_temperatures` globs a fixed `/sys/class/hwmon`, where the CPU's chip must
be found under the configured sysfs root (a simulated rig's) like the cards.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from exporter.daemon.snapshot import SourceError
from exporter.daemon.sources.blocking import BlockingRead
from exporter.daemon.sources.files import TEXT_MAX_BYTES, read_capped
from exporter.process.log_limits import Conditions

log = logging.getLogger(__name__)

# Chips whose sensors are the CPU's own, best first: k10temp is Ryzen's (Tctl, Tccd*).
CPU_SENSOR_CHIPS = ("k10temp", "zenpower", "coretemp", "cpu_thermal")
# /proc/vmstat's pswpin and pswpout count pages of the kernel's page size
# (mm/page_io.c: `count_vm_events(PSWPIN, folio_nr_pages(folio))`; docs/metrics.md#host-metrics).
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# psutil turns those counts into bytes at 4 KiB a page whatever the page size
# (psutil/_pslinux.py swap_memory: `* 4 * 1024`): rescaled below, so a kernel with
# 16 or 64 KiB pages (arm64, ppc64) reads true. On x86-64 the factor is 1.
_PSUTIL_PAGE_BYTES = 4096
_PSI_KINDS = ("some", "full")

# psutil finds /proc through one module global, psutil.PROCFS_PATH, looked up at each
# call (psutil/_common.py get_procfs_path). A host source sets it to its root for its
# read and puts it back. Each source reads one at a time already (its one blocking-read
# thread, exporter/daemon/sources/blocking.py); this lock makes it one at a time across every
# host source in the process (tests and benches run several roots side by side). While
# a read holds it, any other psutil call in the process would read that root: the
# exporter makes none.
_PROCFS_PATH_LOCK = threading.Lock()
# psutil's own words when it sets a value to 0 for want of the kernel's
# (psutil/_pslinux.py virtual_memory and swap_memory); here that value is absent.
_SWAP_COUNTS_UNKNOWN = "'sin' and 'sout' swap memory stats couldn't be determined"
_AVAILABLE_UNKNOWN = "available"
_PSUTIL_DIR = Path(psutil.__file__).parent


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
        reading = self._ram_and_swap()
        reading.pressure_stall_seconds_total = self._memory_pressure()
        reading.cpu_temperatures_celsius = cpu_temperatures(self.sysfs_root)
        return reading

    def _ram_and_swap(self) -> HostReading:
        """psutil's RAM and swap under this source's /proc root."""
        # zoneinfo: psutil's estimate of available memory where meminfo has none.
        for name in ("meminfo", "vmstat", "zoneinfo"):
            _refuse_unbounded(self.proc_root / name)
        # The warnings module's state is process-wide too, hence inside the lock.
        with _PROCFS_PATH_LOCK, warnings.catch_warnings(record=True) as told:
            warnings.simplefilter("always")
            before, psutil.PROCFS_PATH = psutil.PROCFS_PATH, str(self.proc_root)
            try:
                memory, swap = psutil.virtual_memory(), psutil.swap_memory()
            except (OSError, LookupError, ValueError) as exc:  # missing file, field, number
                raise SourceError(f"cannot read RAM and swap from {self.proc_root / 'meminfo'}"
                                  f": {type(exc).__name__} {exc}") from exc
            finally:
                psutil.PROCFS_PATH = before
        said = _psutil_warnings(told)
        if any(_AVAILABLE_UNKNOWN in text.partition(" memory stats")[0].split(", ")
               for text in said):
            raise SourceError(f"no available memory in {self.proc_root / 'meminfo'}")
        # psutil says 0 swapped in and out, and warns, when vmstat lacks the counts.
        swap_counted = not any(_SWAP_COUNTS_UNKNOWN in text for text in said)
        subject = str(self.proc_root / "vmstat")
        if swap_counted:
            self._conditions.ok(subject)
        else:
            self._conditions.failed(subject, "no pswpin and pswpout (or not readable): "
                                    "rig_host_swap_{in,out}_bytes_total are absent")
        return HostReading(
            memory_total_bytes=float(memory.total),
            memory_available_bytes=float(memory.available),
            swap_total_bytes=float(swap.total),
            swap_used_bytes=float(swap.used),
            swap_in_bytes_total=_page_bytes(swap.sin) if swap_counted else None,
            swap_out_bytes_total=_page_bytes(swap.sout) if swap_counted else None,
        )

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
            seconds = psi_total(raw) if raw is not None else None
            if seconds is None:
                shown = "no such line" if raw is None else f"not understood: {raw[:80]!r}"
                self._conditions.failed(subject, f"{shown}; rig_host_memory_pressure_stall_"
                                                 f"seconds_total{{kind=\"{kind}\"}} is absent")
            else:
                self._conditions.ok(subject)
                stalls[kind] = seconds
        return stalls


def _page_bytes(psutil_bytes: int) -> float:
    """psutil's swap bytes, recounted at the kernel's page size."""
    return float(psutil_bytes // _PSUTIL_PAGE_BYTES * PAGE_BYTES)


def _psutil_warnings(told: list[warnings.WarningMessage]) -> list[str]:
    """The texts of psutil's warnings; another thread's, caught in the same moment,
    are given back to the warnings machinery."""
    said = []
    for warning in told:
        if Path(warning.filename).is_relative_to(_PSUTIL_DIR):
            said.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno, source=warning.source)
    return said


def _refuse_unbounded(path: Path) -> None:
    """psutil reads a file to its end, with no limit (exporter/daemon/sources/files.py has one):
    only a regular file within the limit goes to it. The kernel's /proc files are regular
    and say size 0; a link to /dev/zero under a configured root is that file's error."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return  # psutil tells: meminfo's absence fails the read, vmstat's the counts
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(found.st_mode) or found.st_size > TEXT_MAX_BYTES:
        raise SourceError(f"{path}: not a regular file of at most {TEXT_MAX_BYTES} bytes, "
                          "not a kernel file: not read")


def psi_total(line: bytes) -> float | None:
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
    each read capped (exporter/daemon/sources/files.py).
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

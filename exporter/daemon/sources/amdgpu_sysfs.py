"""Read amdgpu cards from a sysfs tree (`/sys`, or a fixture that mirrors it).

Every reading is optional: a file that is missing, unreadable (EPERM while the
card is runtime-suspended), garbage, truncated or too long leaves that one field
None. Its failure is logged when it starts, once an interval while it lasts, and
when the file reads again (exporter/process/log_limits.py). Units are converted to base
units here.
File names and units: docs/facts/amdgpu.md (`amdgpu_pm.c`, `pci-sysfs.c`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from exporter.daemon.snapshot import SourceError
from exporter.daemon.sources import gpu_metrics
from exporter.daemon.sources.energy_counter import EnergyCounter
from exporter.daemon.sources.files import GPU_METRICS_MAX_BYTES, TEXT_MAX_BYTES, read_capped
from exporter.process.log_limits import Conditions

T = TypeVar("T")

log = logging.getLogger(__name__)

AMD_VENDOR_ID = "0x1002"
_CARD_NAME = re.compile(r"^card\d+$")
# `N: <MHz>Mhz[ *]`, or `S: <MHz>Mhz *` for a clock in deep sleep (below half the
# minimum) from the shared printer `smu_cmn_print_dpm_clk_levels` (2025-12 series).
_DPM_LEVEL = re.compile(r"^\s*(\d+|S):\s*(\d+)\s*mhz\s*(\*)?\s*$", re.IGNORECASE)
_LINK_SPEED = re.compile(r"^([\d.]+)\s*GT/s")
# hwmon temp labels (`amdgpu_pm.c`) -> the `sensor` label (docs/metrics.md#gpu-metrics).
_TEMP_SENSORS = {"edge": "edge", "junction": "junction", "mem": "memory"}
_TEMP_LIMITS = {"crit": "critical", "emergency": "emergency"}
_CLOCK_FILES = {"sclk": "pp_dpm_sclk", "mclk": "pp_dpm_mclk"}
# gpu_metrics format revisions 2 and 3 are the APU layouts (v2_x, v3_0: "gfx
# temperature on APUs", kgd_pp_interface.h); 1 is the dGPU family (v1_x).
_INTEGRATED_FORMATS = {2, 3}
# An APU's VRAM is the BIOS carve-out of system RAM ("UMA frame buffer size"). No
# kernel or AMD source states its range; vendors' BIOS pages offer 512 MB to 4 GB
# (Geekom) and "1 GB up to 16 GB" (XMG); 64 MiB is this project's guess of a floor.
# A 7900 XTX has 24 GiB.
_CARVE_OUT_BYTES = (64 * 1024**2, 16 * 1024**3)
# Probed files (power1_input) may be absent, or present and answer -EOPNOTSUPP.
_NOT_SUPPORTED = (errno.ENOENT, errno.EOPNOTSUPP)


@dataclass(frozen=True)
class PcieLink:
    port: str  # "endpoint" (the GPU) or "upstream" (the on-package switch port: the slot link)
    kind: str  # "current" or "max"
    speed_transfers_per_second: float | None
    width_lanes: float | None


@dataclass
class CardReading:
    """One card's readings in base units; None means "not available"."""

    card: str
    pci_bus: str
    unique_id: str
    present: bool = True
    device_id: str = ""  # vendor:device, e.g. 1002:744c
    kind: str = "discrete"  # or "integrated"
    temperatures_celsius: dict[str, float] = field(default_factory=dict)
    temperature_limits_celsius: dict[tuple[str, str], float] = field(default_factory=dict)
    power_watts: float | None = None
    power_cap_watts: float | None = None
    power_cap_max_watts: float | None = None
    energy_joules: float | None = None
    clocks_hertz: dict[str, float] = field(default_factory=dict)
    clock_max_hertz: dict[str, float] = field(default_factory=dict)
    busy_ratio: float | None = None
    memory_busy_ratio: float | None = None
    vram_used_bytes: float | None = None
    vram_total_bytes: float | None = None
    fan_rpm: float | None = None
    pcie_links: list[PcieLink] = field(default_factory=list)
    # None: gpu_metrics unreadable or of an unknown layout, so no reason is known.
    throttle_reasons: frozenset[str] | None = None
    # gpu_metrics (format, content) revision from its header; None: not read.
    gpu_metrics_revision: tuple[int, int] | None = None


@dataclass(frozen=True)
class DpmTable:
    top_hertz: float
    current_hertz: float | None  # None: no line is starred


def parse_dpm_table(text: str) -> DpmTable:
    """The top level and the current clock of a `pp_dpm_*` table, in Hz.

    The top level is the LAST numbered line, not the largest number: on SMU
    13.0.0 the top sclk level is clamped to GameClockAc while the real clock
    boosts above it, and a current clock between the levels prints as a fake
    middle line, even above the top (`smu_v13_0_0_set_default_dpm_table`,
    `smu_v13_0_0_print_clk_levels`). A table may star no line: the old printer
    stars only an exact match, the shared one never stars the top of a
    fine-grained table. Raises ValueError on a line of any other shape.
    """
    top, current = None, None
    for line in text.splitlines():
        match = _DPM_LEVEL.match(line)
        if match is None:
            raise ValueError(f"unexpected line {line[:40]!r}")
        label, mhz, star = match.groups()
        hertz = int(mhz) * 1e6
        if label.upper() != "S":
            top = hertz
        if star and current is None:
            current = hertz
    if top is None:
        raise ValueError("no DPM level")
    return DpmTable(top, current)


def card_kind(metrics_format: int | None, vram_total_bytes: float | None) -> tuple[str, str]:
    """("discrete" | "integrated", the facts that decided it), from sysfs facts only.

    Integrated takes an APU layout of gpu_metrics (with a consistent header) and
    VRAM the size of a carve-out, if VRAM reads at all: one garbled file never
    turns a 7900 XTX into an iGPU that is not read.
    """
    reasons = []
    if metrics_format is not None:
        layout = "an APU" if metrics_format in _INTEGRATED_FORMATS else "a dGPU"
        reasons.append(f"gpu_metrics format {metrics_format}, {layout} layout")
    carve_out = None
    if vram_total_bytes is not None:
        low, high = _CARVE_OUT_BYTES
        carve_out = low <= vram_total_bytes <= high
        reasons.append(f"{vram_total_bytes / 1024**2:.0f} MiB of VRAM"
                       + (", a carve-out" if carve_out else ""))
    integrated = metrics_format in _INTEGRATED_FORMATS and carve_out is not False
    return ("integrated" if integrated else "discrete"), "; ".join(reasons) or "no fact found"


class AmdgpuSysfs:
    """Enumerates amdgpu cards and reads the selected ones; remembers cards that vanish.

    `cards`: "discrete" (the default: skips the Ryzen's iGPU), "all", or PCI addresses.
    """

    def __init__(self, root: str | os.PathLike[str],
                 cards: str | Sequence[str] = "discrete") -> None:
        self.root = Path(root)
        self.cards = cards if isinstance(cards, str) else frozenset(cards)
        self._kinds: dict[str, tuple[str, str]] = {}  # pci_bus -> (kind, reason)
        # Keyed by PCI address: a driver reset can bring a card back as another cardN.
        self._seen: dict[str, tuple[str, str]] = {}  # pci_bus -> (card, unique_id)
        #: (card, file) -> why it cannot be read now (rigctl doctor shows it).
        self.problems: dict[tuple[str, str], str] = {}
        self._files = _FileConditions(Conditions(log, up="{subject}: reads again"),
                                      self.problems)
        self._energy: dict[tuple[str, str], EnergyCounter] = {}  # by (pci_bus, unique_id)

    def read_cards(self) -> list[CardReading]:
        # Each card's PCI device path, resolved once per scrape.
        found = {card: Path(os.path.realpath(device)) for card, device in self._enumerate()}
        readings = [self._read_card(card, endpoint, kind)
                    for card, endpoint in sorted(found.items())
                    if (kind := self._selected_kind(card, endpoint)) is not None]
        read_buses = {reading.pci_bus for reading in readings}
        for reading in readings:
            if reading.pci_bus in self._seen:
                self._files.ok(f"{self._seen[reading.pci_bus][0]}: device")
            self._seen[reading.pci_bus] = (reading.card, reading.unique_id)
        for endpoint in found.values():
            if endpoint.name not in read_buses:  # on the bus, but `cards` does not select it
                self._seen.pop(endpoint.name, None)
        # A card that fell off the bus keeps its series with gpu_present 0, so it
        # alerts instead of going silent.
        for pci_bus, (card, unique_id) in sorted(self._seen.items()):
            if pci_bus not in read_buses:
                self._files.failed(f"{card}: device", "card has disappeared")
                readings.append(CardReading(card, pci_bus, unique_id, present=False))
        return readings

    def _enumerate(self) -> list[tuple[str, Path]]:
        drm = self.root / "class" / "drm"
        try:
            entries = sorted(os.listdir(drm))
        except OSError as exc:
            raise SourceError(f"cannot list {drm}: {exc.strerror}") from exc
        cards = []
        for entry in entries:
            device = drm / entry / "device"
            if _CARD_NAME.match(entry) and self._is_amdgpu(device):
                cards.append((entry, device))
        return cards

    def _is_amdgpu(self, device: Path) -> bool:
        return _peek(device / "vendor") == AMD_VENDOR_ID

    def _selected_kind(self, card: str, device: Path) -> str | None:
        """The card's kind if `cards` selects it, else None (told once)."""
        pci_bus = device.name
        if pci_bus not in self._kinds:
            # Peeks, not reads: a failure here is told when the card is read.
            blob = _peek_bytes(device / "gpu_metrics", GPU_METRICS_MAX_BYTES)
            metrics_format = gpu_metrics.format_revision(blob) if blob else None
            vram_text = _peek(device / "mem_info_vram_total")
            vram = float(vram_text) if vram_text and vram_text.isdigit() else None
            kind, why = card_kind(metrics_format, vram)
            if metrics_format is None:  # the deciding fact is missing: ask again next time
                return kind if self._selects(pci_bus, kind) else None
            self._kinds[pci_bus] = (kind, why)
            if not self._selects(pci_bus, kind):
                log.info("%s (%s, %s) is %s (%s); not read: [gpu] cards = %s", card, pci_bus,
                         _device_id(_CardFiles(card, device, self._files)), kind, why,
                         _describe(self.cards))
        kind = self._kinds[pci_bus][0]
        return kind if self._selects(pci_bus, kind) else None

    def _selects(self, pci_bus: str, kind: str) -> bool:
        if self.cards == "all":
            return True
        if self.cards == "discrete":
            return kind == "discrete"
        return pci_bus in self.cards

    def _read_card(self, card: str, endpoint: Path, kind: str) -> CardReading:
        files = _CardFiles(card, endpoint, self._files)
        reading = CardReading(card, endpoint.name, files.text("unique_id", quiet=True) or "",
                              device_id=_device_id(files), kind=kind)
        hwmon = self._hwmon(endpoint)
        if hwmon is not None:
            self._files.ok(f"{card}: hwmon")
            self._read_hwmon(reading, _CardFiles(card, hwmon, self._files))
        else:
            self._files.failed(f"{card}: hwmon", "no amdgpu hwmon directory")
        for clock, filename in _CLOCK_FILES.items():
            table = files.dpm_table(filename)
            if table is not None:
                reading.clock_max_hertz[clock] = table.top_hertz
                if table.current_hertz is not None:
                    reading.clocks_hertz.setdefault(clock, table.current_hertz)
        reading.busy_ratio = files.ratio("gpu_busy_percent")
        reading.memory_busy_ratio = files.ratio("mem_busy_percent")
        reading.vram_used_bytes = files.number("mem_info_vram_used")
        reading.vram_total_bytes = files.number("mem_info_vram_total")
        reading.pcie_links = self._pcie_links(card, endpoint)
        self._read_gpu_metrics(reading, files)
        return reading

    def _hwmon(self, device: Path) -> Path | None:
        try:
            candidates = sorted((device / "hwmon").iterdir())
        except OSError:
            return None
        for candidate in candidates:
            if _peek(candidate / "name") == "amdgpu":
                return candidate
        return None

    def _read_hwmon(self, reading: CardReading, hwmon: _CardFiles) -> None:
        for index in (1, 2, 3):
            label = hwmon.text(f"temp{index}_label", quiet=True)
            sensor = _TEMP_SENSORS.get(label or "")
            if sensor is None:
                continue
            value = hwmon.number(f"temp{index}_input", scale=1e-3)
            if value is not None:
                reading.temperatures_celsius[sensor] = value
            for suffix, limit in _TEMP_LIMITS.items():
                bound = hwmon.number(f"temp{index}_{suffix}", scale=1e-3, quiet=True)
                if bound is not None:
                    reading.temperature_limits_celsius[(sensor, limit)] = bound
        # power1_input is hidden on SMU 13.0.0 (GPU_INPUT_POWER is EOPNOTSUPP);
        # power1_average is the socket power there, in 1 W steps.
        reading.power_watts = hwmon.number("power1_input", scale=1e-6, quiet=True)
        if reading.power_watts is None:
            reading.power_watts = hwmon.number("power1_average", scale=1e-6)
        reading.power_cap_watts = hwmon.number("power1_cap", scale=1e-6)
        reading.power_cap_max_watts = hwmon.number("power1_cap_max", scale=1e-6)
        for index in (1, 2):
            label = hwmon.text(f"freq{index}_label", quiet=True)
            if label in _CLOCK_FILES:
                value = hwmon.number(f"freq{index}_input")
                if value is not None:
                    reading.clocks_hertz[label] = value
        reading.fan_rpm = hwmon.number("fan1_input", quiet=True)

    def _pcie_links(self, card: str, endpoint: Path) -> list[PcieLink]:
        # On RDNA the endpoint sits behind an on-package switch: its own link
        # reads x16 even in an x8 slot. The slot link is on the upstream switch
        # port, two bridges up (LACT#334,
        # docs/facts/amdgpu.md#pcie-link-behind-the-on-package-switch).
        ports = {"endpoint": endpoint}
        upstream = endpoint.parent.parent
        if re.match(r"^[0-9a-f]{4}:", upstream.name):
            ports["upstream"] = upstream
        links = []
        for port, path in ports.items():
            files = _CardFiles(card, path, self._files, prefix=f"{port}/")
            for kind in ("current", "max"):
                speed = files.link_speed(f"{kind}_link_speed")
                width = files.number(f"{kind}_link_width")
                if speed is not None or width is not None:
                    links.append(PcieLink(port, kind, speed, width))
        return links

    def _read_gpu_metrics(self, reading: CardReading, files: _CardFiles) -> None:
        blob = files.raw("gpu_metrics", max_bytes=GPU_METRICS_MAX_BYTES)
        if blob is None:
            return
        reading.gpu_metrics_revision = gpu_metrics.revision(blob)
        metrics = files.parse("gpu_metrics", blob, gpu_metrics.decode)
        if metrics is None:
            return
        if metrics.throttle_status is not None:
            reading.throttle_reasons = gpu_metrics.throttle_reasons(metrics.throttle_status)
        if metrics.energy_accumulator is not None:
            counter = self._energy.setdefault((reading.pci_bus, reading.unique_id),
                                              EnergyCounter())
            reading.energy_joules = counter.add(metrics.energy_accumulator,
                                                metrics.system_clock_ns,
                                                metrics.average_socket_power_watts)


def _device_id(files: _CardFiles) -> str:
    vendor, device = files.text("vendor", quiet=True), files.text("device", quiet=True)
    if not vendor or not device:
        return ""
    return f"{vendor.lower().removeprefix('0x')}:{device.lower().removeprefix('0x')}"


def _describe(cards: str | frozenset[str]) -> str:
    return cards if isinstance(cards, str) else ", ".join(sorted(cards))


class _FileConditions:
    """Each card file's state, subjects "card1: gpu_busy_percent": told through the
    log's Conditions, and kept in `problems` while it lasts."""

    def __init__(self, conditions: Conditions, problems: dict[tuple[str, str], str]) -> None:
        self.conditions = conditions
        self.problems = problems

    def failed(self, subject: str, reason: str) -> None:
        self.problems[_key(subject)] = reason
        self.conditions.failed(subject, reason)

    def ok(self, subject: str) -> None:
        self.problems.pop(_key(subject), None)
        self.conditions.ok(subject)


def _key(subject: str) -> tuple[str, str]:
    card, _, name = subject.partition(": ")
    return card, name


class _CardFiles:
    """Reads one directory's files; a failure is None, and told (see the module)."""

    def __init__(self, card: str, directory: Path, conditions: _FileConditions,
                 prefix: str = "") -> None:
        self.card = card
        self.directory = directory
        self.conditions = conditions
        self.prefix = prefix

    def read(self, name: str, parse: Callable[[bytes], T], quiet: bool = False,
             max_bytes: int = TEXT_MAX_BYTES) -> T | None:
        """`parse` of the file's bytes; ValueError from it is the file's failure.
        `quiet`: a file the ASIC may lack (absent or EOPNOTSUPP) is no failure."""
        blob = self.raw(name, quiet, max_bytes)
        return None if blob is None else self.parse(name, blob, parse)

    def raw(self, name: str, quiet: bool = False,
            max_bytes: int = TEXT_MAX_BYTES) -> bytes | None:
        """The file's bytes; a read failure is told, a success is not yet (`parse` tells)."""
        try:
            return read_capped(self.directory / name, max_bytes)
        except OSError as exc:
            if not (quiet and exc.errno in _NOT_SUPPORTED):
                self.conditions.failed(self._subject(name), _reason(exc))
            return None

    def parse(self, name: str, blob: bytes, parse: Callable[[bytes], T]) -> T | None:
        try:
            value = parse(blob)
        except ValueError as exc:  # UnicodeDecodeError and GpuMetricsError too
            self.conditions.failed(self._subject(name), str(exc))
            return None
        self.conditions.ok(self._subject(name))
        return value

    def _subject(self, name: str) -> str:
        return f"{self.card}: {self.prefix}{name}"

    def text(self, name: str, quiet: bool = False) -> str | None:
        return self.read(name, _ascii, quiet)

    def number(self, name: str, scale: float = 1.0, quiet: bool = False) -> float | None:
        return self.read(name, lambda blob: _integer(blob) * scale, quiet)

    def ratio(self, name: str) -> float | None:
        return self.read(name, _ratio)

    def link_speed(self, name: str) -> float | None:
        return self.read(name, _link_speed, quiet=True)

    def dpm_table(self, name: str) -> DpmTable | None:
        return self.read(name, lambda blob: parse_dpm_table(_ascii(blob)))


def _ascii(blob: bytes) -> str:
    return blob.decode("ascii").strip()


def _integer(blob: bytes) -> int:
    text = _ascii(blob)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not an integer: {text[:40]!r}") from None


def _ratio(blob: bytes) -> float:
    percent = _integer(blob)
    if not 0 <= percent <= 100:
        raise ValueError(f"percentage out of range: {percent:g}")
    return percent / 100


def _link_speed(blob: bytes) -> float:
    text = _ascii(blob)
    match = _LINK_SPEED.match(text)
    if match is None:  # "Unknown" while the link is down
        raise ValueError(f"no link speed in {text[:40]!r}")
    return float(match.group(1)) * 1e9


def _reason(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EPERM, errno.EBUSY, errno.ENODATA):
        reason += " (card suspended or in reset?)"
    return reason


def _peek_bytes(path: Path, max_bytes: int = TEXT_MAX_BYTES) -> bytes | None:
    """A file's bytes, or None on any failure, told nowhere (enumeration, kind)."""
    try:
        return read_capped(path, max_bytes)
    except OSError:
        return None


def _peek(path: Path) -> str | None:
    blob = _peek_bytes(path)
    try:
        return None if blob is None else _ascii(blob)
    except UnicodeDecodeError:
        return None

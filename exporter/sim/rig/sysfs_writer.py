"""Write an amdgpu sysfs tree for simulated 7900 XTX cards.

The layout follows docs/facts/amdgpu.md: `class/drm/cardN` links to
the PCI device under `devices/`, the GPU endpoint sits behind the on-package
switch (upstream port two bridges up), hwmon in `device/hwmon/hwmonN`, and a
binary gpu_metrics v1.3. The tests' fixture tree and the simulated rig both
come from here; `python -m exporter.sim.rig.sysfs_writer DIR` writes the fixture
tree: the rig's two cards and the Ryzen's iGPU.

By default a card looks as a 7900 XTX does on kernel 6.6 and later:
- no `power1_input`: SMU 13.0.0 answers GPU_INPUT_POWER with -EOPNOTSUPP
  (`smu_v13_0_0_read_sensor`) and `hwmon_attributes_visible` hides the file;
- `power1_average` in whole watts, as µW: `AverageSocketPower << 8` converted
  by `(q >> 8) * 1000000 + (q & 0xff) * 1000` (`amdgpu_pm.c`);
- gpu_metrics `energy_accumulator` 0: not filled by current firmware (reported
  by users; the kernel only copies the firmware's value).
`OLDER_LAYOUT_CARD` is the layout this fixture had before: `power1_input`
present and a filled energy accumulator.

`pp_dpm_*` text comes from one of the two printers SMU 13.0.0 has had:
`smu13` (`smu_v13_0_0_print_clk_levels`) or `shared`
(`smu_cmn_print_dpm_clk_levels`, the 2025-12 series, with its `S:` line).
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

ALL_ONES = 0xFF


@dataclass(frozen=True)
class CardSpec:
    """One card's state in sysfs units (m°C, µW, Hz, %, bytes) and gpu_metrics units."""

    card: str = "card1"
    endpoint: str = "0000:03:00.0"
    upstream: str = "0000:01:00.0"
    downstream: str = "0000:02:00.0"
    root_port: str = "0000:00:01.1"
    hwmon: str = "hwmon4"
    unique_id: str = "6a3c1f2b9e04d751"
    edge_mc: int = 66000
    junction_mc: int | None = 88000  # None: no such sensor (an APU has edge only)
    memory_mc: int | None = 86000
    power_average_uw: int = 339000000
    power_input_uw: int | None = None  # hidden on SMU 13.0.0
    power_cap_uw: int | None = 339000000
    power_cap_max_uw: int = 350000000
    sclk_hz: int = 2250000000
    sclk_levels_mhz: tuple[int, ...] = (500, 2304)  # fine-grained: min and max only
    mclk_levels_mhz: tuple[int, ...] = (96, 456, 772, 1249)
    mclk_hz: int = 1249000000
    busy_percent: int = 99
    memory_busy_percent: int = 41
    vram_total: int = 25753026560
    vram_used: int = 23622320128
    fan_rpm: int | None = 1712
    endpoint_link: tuple[str, int] = ("16.0 GT/s PCIe", 16)
    upstream_link: tuple[str, int] = ("16.0 GT/s PCIe", 16)
    upstream_max_link: tuple[str, int] = ("16.0 GT/s PCIe", 16)
    throttle_status: int = 0x00010002  # TEMP_HOTSPOT (the Navi 31 quirk) and PPT0
    energy_accumulator: int = 0  # 0 on newer PMFW
    system_clock_ns: int = 912345678901234  # gpu_metrics system_clock_counter: boottime ns
    extra_files: dict[str, str] = field(default_factory=dict)
    device_id: str = "0x744c"  # Navi 31
    revision: str = "0xc8"  # XTX
    metrics_revision: tuple[int, int] = (1, 3)  # gpu_metrics format, content
    dpm_printer: str = "smu13"  # or "shared" (see the module docstring)


# The rig's two cards (docs/facts/rig.md) on kernel 6.6+: card1 busy and boosting above
# its top sclk level (2450 MHz over a GameClockAc of 2304), unthrottled; card2 on its
# power cap with the always-set hotspot bit, behind an x8 slot.
RIG_CARDS = (
    CardSpec(card="card1", power_average_uw=287000000, throttle_status=0,
             sclk_hz=2450000000),
    CardSpec(
        card="card2", endpoint="0000:0a:00.0", upstream="0000:08:00.0",
        downstream="0000:09:00.0", root_port="0000:00:01.2", hwmon="hwmon5",
        unique_id="1b7e04c2d95a3f60", edge_mc=71000, junction_mc=97000, memory_mc=90000,
        sclk_hz=2100000000, fan_rpm=2240, busy_percent=100, memory_busy_percent=47,
        vram_used=23890755584, upstream_link=("16.0 GT/s PCIe", 8),
    ),
)

# card1 as the fixture had it before kernel 6.6 fidelity: power1_input present
# (287 W, beside a 285 W average) and a filled energy accumulator.
OLDER_LAYOUT_CARD = replace(RIG_CARDS[0], power_input_uw=287000000,
                            power_average_uw=285000000, energy_accumulator=123456789)

# The Ryzen 5 9600X's RDNA2 iGPU (1002:13c0) where the BIOS enables it: an APU
# gpu_metrics layout (format 2: `gpu_metrics_v2_1`, kgd_pp_interface.h), its
# VRAM a 512 MiB carve-out of system RAM, directly on a root port (no switch),
# one temperature sensor, no fan and no power cap. Values illustrative.
RYZEN_IGPU = CardSpec(
    card="card3", endpoint="0000:7c:00.0", upstream="", downstream="",
    root_port="0000:00:08.1", hwmon="hwmon6", unique_id="", edge_mc=45000,
    junction_mc=None, memory_mc=None, power_average_uw=3000000, power_cap_uw=None,
    sclk_hz=600000000, sclk_levels_mhz=(600, 2200), mclk_levels_mhz=(400, 2400),
    mclk_hz=2400000000, busy_percent=0, memory_busy_percent=0, vram_total=536870912,
    vram_used=67108864, fan_rpm=None, endpoint_link=("16.0 GT/s PCIe", 16),
    throttle_status=0, device_id="0x13c0", revision="0xc5", metrics_revision=(2, 1),
)
FIXTURE_CARDS = RIG_CARDS + (RYZEN_IGPU,)


def idle(spec: CardSpec, dpm_printer: str = "shared") -> CardSpec:
    """The card at idle: gfx in deep sleep at 5 MHz (an idle Navi 31 reports
    about that), 10 W, fans stopped, only the hotspot bit set
    (docs/facts/amdgpu.md#contrast-samples)."""
    return replace(
        spec, sclk_hz=5000000, mclk_hz=96000000, busy_percent=0, memory_busy_percent=0,
        power_average_uw=10000000, fan_rpm=0 if spec.fan_rpm is not None else None,
        edge_mc=35000, junction_mc=41000 if spec.junction_mc is not None else None,
        memory_mc=40000 if spec.memory_mc is not None else None, throttle_status=0x2,
        dpm_printer=dpm_printer,
    )


def gpu_metrics_v1_3(spec: CardSpec) -> bytes:
    """A 120-byte gpu_metrics v1.3 blob: all-ones, then the fields SMU 13.0.0 fills."""
    blob = bytearray([ALL_ONES] * 120)

    def put(offset: int, fmt: str, value: int) -> None:
        struct.pack_into(fmt, blob, offset, value)

    put(0x00, "<H", 120)
    put(0x02, "<B", 1)
    put(0x03, "<B", 3)
    for offset, value in ((0x04, spec.edge_mc), (0x06, spec.junction_mc), (0x08, spec.memory_mc)):
        if value is not None:
            put(offset, "<H", value // 1000)
    put(0x10, "<H", spec.busy_percent)
    put(0x12, "<H", spec.memory_busy_percent)
    put(0x16, "<H", spec.power_average_uw // 1_000_000)
    put(0x18, "<Q", spec.energy_accumulator)
    put(0x20, "<Q", spec.system_clock_ns)
    put(0x28, "<H", spec.sclk_hz // 1_000_000)
    put(0x36, "<H", spec.sclk_hz // 1_000_000)
    put(0x44, "<I", spec.throttle_status)
    if spec.fan_rpm is not None:
        put(0x48, "<H", spec.fan_rpm)
    return bytes(blob)


def gpu_metrics_v2_1(spec: CardSpec) -> bytes:
    """An APU's 120-byte gpu_metrics v2.1 (`struct gpu_metrics_v2_1`): the header,
    gfx temperature, activity, timestamp, socket power and throttle status."""
    blob = bytearray([ALL_ONES] * 120)
    struct.pack_into("<HBB", blob, 0, 120, 2, 1)
    struct.pack_into("<H", blob, 4, spec.edge_mc // 1000)  # temperature_gfx
    struct.pack_into("<H", blob, 28, spec.busy_percent)  # average_gfx_activity
    struct.pack_into("<Q", blob, 32, spec.system_clock_ns)
    struct.pack_into("<H", blob, 40, spec.power_average_uw // 1_000_000)
    struct.pack_into("<I", blob, 108, spec.throttle_status)
    return bytes(blob)


def _gpu_metrics(spec: CardSpec) -> bytes:
    if spec.metrics_revision == (1, 3):
        return gpu_metrics_v1_3(spec)
    if spec.metrics_revision == (2, 1):
        return gpu_metrics_v2_1(spec)
    raise ValueError(f"no writer for gpu_metrics {spec.metrics_revision}")


def _dpm_table(levels_mhz: tuple[int, ...], current_mhz: int, fine_grained: bool,
               printer: str) -> str:
    """pp_dpm_* text as SMU 13.0.0's printers emit it (see the module docstring)."""
    if printer == "shared":
        return _shared_printer(levels_mhz, current_mhz, fine_grained)
    if printer != "smu13":
        raise ValueError(f"unknown pp_dpm printer {printer!r}")
    low, high = levels_mhz[0], levels_mhz[-1]
    if fine_grained and current_mhz not in (low, high):
        # The current clock between (or outside) the two levels, as a fake middle line.
        return f"0: {low}Mhz\n1: {current_mhz}Mhz *\n2: {high}Mhz\n"
    return "".join(f"{i}: {mhz}Mhz {'*' if mhz == current_mhz else ''}\n"
                   for i, mhz in enumerate(levels_mhz))


def _shared_printer(levels_mhz: tuple[int, ...], current_mhz: int, fine_grained: bool) -> str:
    def near(a: int, b: int) -> bool:  # "Frequencies within 25 MHz are considered equal"
        return abs(a - b) <= 25

    deep_sleep = current_mhz < levels_mhz[0] // 2
    lines = [f"S: {current_mhz}Mhz *\n"] if deep_sleep else []
    first = 1 if deep_sleep else 0
    if not fine_grained:
        values, starred = list(levels_mhz), [not deep_sleep and near(current_mhz, v)
                                             for v in levels_mhz]
    else:
        level = -1
        if not deep_sleep:
            level = 0 if near(current_mhz, levels_mhz[0]) else (
                2 if near(current_mhz, levels_mhz[-1]) else 1)
        values = [levels_mhz[0], current_mhz, levels_mhz[-1]]
        if level != 1:
            values = [levels_mhz[0], levels_mhz[-1]]  # a level 2 match is never starred
        starred = [not deep_sleep and i == level for i in range(len(values))]
    lines += [f"{first + i}: {mhz}Mhz {'*' if star else ''}\n"
              for i, (mhz, star) in enumerate(zip(values, starred, strict=True))]
    return "".join(lines)


def write_card(root: Path, spec: CardSpec) -> Path:
    """Write one card under `root` (a sysfs root); return its PCI device directory."""
    upstream = root / "devices" / "pci0000:00" / spec.root_port
    if spec.upstream:  # a discrete card's on-package switch: upstream and downstream port
        upstream = upstream / spec.upstream
    device = upstream / spec.downstream / spec.endpoint if spec.downstream else (
        upstream / spec.endpoint)
    hwmon = device / "hwmon" / spec.hwmon
    drm = device / "drm" / spec.card
    for directory in (hwmon, drm, root / "class" / "drm"):
        directory.mkdir(parents=True, exist_ok=True)

    ports = [(device, spec.endpoint_link, spec.endpoint_link)]
    if spec.upstream:
        ports.append((upstream, spec.upstream_link, spec.upstream_max_link))
    for port, (speed, width), (max_speed, max_width) in ports:
        _write(port, current_link_speed=speed, current_link_width=width,
               max_link_speed=max_speed, max_link_width=max_width)

    identity = {"unique_id": spec.unique_id} if spec.unique_id else {}
    _write(
        device,
        vendor="0x1002", device=spec.device_id, revision=spec.revision, **identity,
        gpu_busy_percent=spec.busy_percent, mem_busy_percent=spec.memory_busy_percent,
        mem_info_vram_total=spec.vram_total, mem_info_vram_used=spec.vram_used,
        pp_dpm_sclk=_dpm_table(spec.sclk_levels_mhz, spec.sclk_hz // 1_000_000, True,
                               spec.dpm_printer),
        pp_dpm_mclk=_dpm_table(spec.mclk_levels_mhz, spec.mclk_hz // 1_000_000, False,
                               spec.dpm_printer),
    )
    (device / "gpu_metrics").write_bytes(_gpu_metrics(spec))
    _write(hwmon, name="amdgpu", **_hwmon_files(spec))
    for relative, text in spec.extra_files.items():
        (device / relative).write_text(text)

    _relink(drm / "device", os.path.relpath(device, drm))
    _relink(root / "class" / "drm" / spec.card, os.path.relpath(drm, root / "class" / "drm"))
    render = root / "class" / "drm" / f"renderD{127 + int(spec.card.removeprefix('card'))}"
    _relink(render, os.path.relpath(drm, render.parent))  # same device: must be skipped
    return device


def _hwmon_files(spec: CardSpec) -> dict[str, object]:
    files: dict[str, object] = {
        "temp1_label": "edge", "temp1_input": spec.edge_mc, "temp1_crit": 100000,
        "temp1_emergency": 105000,
        "power1_label": "PPT", "power1_average": spec.power_average_uw,
        "freq1_label": "sclk", "freq1_input": spec.sclk_hz,
        "freq2_label": "mclk", "freq2_input": spec.mclk_hz,
    }
    for index, label, value, crit in ((2, "junction", spec.junction_mc, 110000),
                                      (3, "mem", spec.memory_mc, 108000)):
        if value is not None:  # hwmon shows junction and mem on SOC15 dGPUs only
            files |= {f"temp{index}_label": label, f"temp{index}_input": value,
                      f"temp{index}_crit": crit, f"temp{index}_emergency": crit + 5000}
    if spec.power_input_uw is not None:
        files["power1_input"] = spec.power_input_uw
    if spec.power_cap_uw is not None:
        files |= {"power1_cap": spec.power_cap_uw, "power1_cap_max": spec.power_cap_max_uw}
    if spec.fan_rpm is not None:
        files |= {"fan1_input": spec.fan_rpm, "fan1_max": 3200}
    return files


def write_rig(root: Path, cards: tuple[CardSpec, ...] = RIG_CARDS) -> None:
    for spec in cards:
        write_card(root, spec)
    # A non-AMD framebuffer and a connector entry, which enumeration must skip.
    simple = root / "devices" / "platform" / "simple-framebuffer.0"
    (simple / "drm" / "card0").mkdir(parents=True, exist_ok=True)
    (simple / "vendor").write_text("0x0000\n")
    _relink(simple / "drm" / "card0" / "device", "../..")
    _relink(root / "class" / "drm" / "card0",
            os.path.relpath(simple / "drm" / "card0", root / "class" / "drm"))
    (root / "class" / "drm" / "card1-DP-1").mkdir(exist_ok=True)


def remove_card(root: Path, card: str) -> None:
    """The card fell off the bus: its DRM entry goes away."""
    (root / "class" / "drm" / card).unlink()


def _write(directory: Path, **files: object) -> None:
    for name, value in files.items():
        text = value if isinstance(value, str) and value.endswith("\n") else f"{value}\n"
        (directory / name).write_text(text)


def _relink(link: Path, target: str) -> None:
    if link.is_symlink():
        link.unlink()
    link.symlink_to(target)


if __name__ == "__main__":
    write_rig(Path(sys.argv[1]), FIXTURE_CARDS)

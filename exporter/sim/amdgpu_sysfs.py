"""Write an amdgpu sysfs tree for simulated 7900 XTX cards.

The layout follows reference/amd-gpu.md Appendix A: `class/drm/cardN` links to
the PCI device under `devices/`, the GPU endpoint sits behind the on-package
switch (upstream port two bridges up), hwmon in `device/hwmon/hwmonN`, and a
binary gpu_metrics v1.3. The tests' fixture tree and the simulated rig both
come from here; `python -m exporter.sim.amdgpu_sysfs DIR` writes the rig's two
cards.
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
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
    junction_mc: int = 88000
    memory_mc: int = 86000
    power_average_uw: int = 339000000
    power_input_uw: int | None = None  # hidden on SMU 13.0.0
    power_cap_uw: int = 339000000
    power_cap_max_uw: int = 350000000
    sclk_hz: int = 2250000000
    sclk_levels_mhz: tuple[int, ...] = (500, 2304)  # fine-grained: min and max only
    mclk_levels_mhz: tuple[int, ...] = (96, 456, 772, 1249)
    mclk_hz: int = 1249000000
    busy_percent: int = 99
    memory_busy_percent: int = 41
    vram_total: int = 25753026560
    vram_used: int = 23622320128
    fan_rpm: int = 1712
    endpoint_link: tuple[str, int] = ("16.0 GT/s PCIe", 16)
    upstream_link: tuple[str, int] = ("16.0 GT/s PCIe", 16)
    upstream_max_link: tuple[str, int] = ("16.0 GT/s PCIe", 16)
    throttle_status: int = 0x00010002  # TEMP_HOTSPOT (the Navi 31 quirk) and PPT0
    energy_accumulator: int = 0  # 0 on newer PMFW
    system_clock_ns: int = 912345678901234  # gpu_metrics system_clock_counter: boottime ns
    extra_files: dict[str, str] = field(default_factory=dict)


# The rig's two cards (rig-facts.md): card1 unthrottled with power1_input present;
# card2 on its power cap, the always-set hotspot bit, no power1_input, and an x8 slot.
RIG_CARDS = (
    CardSpec(
        card="card1", power_input_uw=287000000, power_average_uw=285000000,
        throttle_status=0, energy_accumulator=123456789,
    ),
    CardSpec(
        card="card2", endpoint="0000:0a:00.0", upstream="0000:08:00.0",
        downstream="0000:09:00.0", root_port="0000:00:01.2", hwmon="hwmon5",
        unique_id="1b7e04c2d95a3f60", edge_mc=71000, junction_mc=97000, memory_mc=90000,
        sclk_hz=2100000000, fan_rpm=2240, busy_percent=100, memory_busy_percent=47,
        vram_used=23890755584, upstream_link=("16.0 GT/s PCIe", 8),
    ),
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
        put(offset, "<H", value // 1000)
    put(0x10, "<H", spec.busy_percent)
    put(0x12, "<H", spec.memory_busy_percent)
    put(0x16, "<H", spec.power_average_uw // 1_000_000)
    put(0x18, "<Q", spec.energy_accumulator)
    put(0x20, "<Q", spec.system_clock_ns)
    put(0x28, "<H", spec.sclk_hz // 1_000_000)
    put(0x36, "<H", spec.sclk_hz // 1_000_000)
    put(0x44, "<I", spec.throttle_status)
    put(0x48, "<H", spec.fan_rpm)
    return bytes(blob)


def _dpm_table(levels_mhz: tuple[int, ...], current_mhz: int) -> str:
    """pp_dpm_* text; SMU 13.0.0 shows a current sclk between levels as a fake middle line."""
    lines = [f"{mhz}Mhz{' *' if mhz == current_mhz else ''}" for mhz in levels_mhz]
    if current_mhz not in levels_mhz:
        lines.insert(1, f"{current_mhz}Mhz *")
    return "".join(f"{i}: {line}\n" for i, line in enumerate(lines))


def write_card(root: Path, spec: CardSpec) -> Path:
    """Write one card under `root` (a sysfs root); return its PCI device directory."""
    upstream = root / "devices" / "pci0000:00" / spec.root_port / spec.upstream
    device = upstream / spec.downstream / spec.endpoint
    hwmon = device / "hwmon" / spec.hwmon
    drm = device / "drm" / spec.card
    for directory in (hwmon, drm, root / "class" / "drm"):
        directory.mkdir(parents=True, exist_ok=True)

    for port, (speed, width), (max_speed, max_width) in (
        (upstream, spec.upstream_link, spec.upstream_max_link),
        (device, spec.endpoint_link, spec.endpoint_link),
    ):
        _write(port, current_link_speed=speed, current_link_width=width,
               max_link_speed=max_speed, max_link_width=max_width)

    _write(
        device,
        vendor="0x1002", device="0x744c", revision="0xc8", unique_id=spec.unique_id,
        gpu_busy_percent=spec.busy_percent, mem_busy_percent=spec.memory_busy_percent,
        mem_info_vram_total=spec.vram_total, mem_info_vram_used=spec.vram_used,
        pp_dpm_sclk=_dpm_table(spec.sclk_levels_mhz, spec.sclk_hz // 1_000_000),
        pp_dpm_mclk=_dpm_table(spec.mclk_levels_mhz, spec.mclk_hz // 1_000_000),
    )
    (device / "gpu_metrics").write_bytes(gpu_metrics_v1_3(spec))

    power = {"power1_average": spec.power_average_uw}
    if spec.power_input_uw is not None:
        power["power1_input"] = spec.power_input_uw
    _write(
        hwmon,
        name="amdgpu",
        temp1_label="edge", temp1_input=spec.edge_mc, temp1_crit=100000, temp1_emergency=105000,
        temp2_label="junction", temp2_input=spec.junction_mc, temp2_crit=110000,
        temp2_emergency=115000,
        temp3_label="mem", temp3_input=spec.memory_mc, temp3_crit=108000,
        temp3_emergency=113000,
        power1_label="PPT", power1_cap=spec.power_cap_uw, power1_cap_max=spec.power_cap_max_uw,
        freq1_label="sclk", freq1_input=spec.sclk_hz,
        freq2_label="mclk", freq2_input=spec.mclk_hz,
        fan1_input=spec.fan_rpm, fan1_max=3200,
        **power,
    )
    for relative, text in spec.extra_files.items():
        (device / relative).write_text(text)

    _relink(drm / "device", os.path.relpath(device, drm))
    _relink(root / "class" / "drm" / spec.card, os.path.relpath(drm, root / "class" / "drm"))
    render = root / "class" / "drm" / f"renderD{127 + int(spec.card.removeprefix('card'))}"
    _relink(render, os.path.relpath(drm, render.parent))  # same device: must be skipped
    return device


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
    write_rig(Path(sys.argv[1]))

"""Decode amdgpu's binary `gpu_metrics` file and its throttle bits.

Layout: `struct gpu_metrics_v1_3` in the kernel's `kgd_pp_interface.h`, which a
7900 XTX (SMU 13.0.0) produces: 120 bytes, little-endian. The kernel fills the
struct with 0xFF before writing it, so an all-ones field means "not available"
(`smu_cmn_init_soft_gpu_metrics`). Other revisions are recognised by their
header and reported as "no layout", never guessed at.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct("<HBB")  # structure_size, format_revision, content_revision

# Offsets of the v1.3 fields this exporter uses (docs/facts/amdgpu.md#gpu_metrics-v13).
_V1_3_SIZE = 120
_V1_3_FIELDS = {
    "temperature_hotspot": (0x06, "<H"),
    "average_socket_power": (0x16, "<H"),
    "energy_accumulator": (0x18, "<Q"),
    "system_clock_counter": (0x20, "<Q"),
    "average_gfxclk_frequency": (0x28, "<H"),
    "throttle_status": (0x44, "<I"),
}

# ASIC-dependent throttle_status bits on SMU 13.0.0
# (`smu13_driver_if_v13_0_0.h`, "Throttler Control/Status Bits"), grouped into
# the reason labels of docs/facts/amdgpu.md#throttle-status-bits.
THROTTLE_REASONS = (
    "power", "thermal_junction", "thermal_edge", "thermal_memory",
    "current", "thermal_vr", "reliability", "other",
)
_BIT_REASON = {
    0: "thermal_edge",                                           # TEMP_EDGE
    1: "thermal_junction", 2: "thermal_junction", 3: "thermal_junction",  # HOTSPOT, _G, _M
    4: "thermal_memory",                                         # TEMP_MEM
    5: "thermal_vr", 6: "thermal_vr", 7: "thermal_vr", 8: "thermal_vr", 9: "thermal_vr",
    10: "other", 11: "other", 12: "other",                       # LIQUID0/1, PLX
    13: "current", 14: "current", 15: "current", 21: "current",  # TDC_*, GFX_APCC_PLUS
    16: "power", 17: "power", 18: "power", 19: "power",          # PPT0-3
    20: "reliability",                                           # FIT
}


class GpuMetricsError(ValueError):
    """The blob is too short, or a revision whose layout this exporter lacks."""


@dataclass(frozen=True)
class GpuMetrics:
    format_revision: int
    content_revision: int
    throttle_status: int | None = None
    energy_accumulator: int | None = None  # raw counts; see energy_counter.py
    system_clock_ns: int | None = None
    temperature_hotspot_celsius: float | None = None
    average_socket_power_watts: float | None = None
    average_gfxclk_hertz: float | None = None


def decode(blob: bytes) -> GpuMetrics:
    if len(blob) < HEADER.size:
        raise GpuMetricsError(f"{len(blob)} bytes, shorter than the 4-byte header")
    size, frev, crev = HEADER.unpack_from(blob)
    if (frev, crev) != (1, 3):
        raise GpuMetricsError(f"revision {frev}.{crev} has no known layout here")
    if size != _V1_3_SIZE or len(blob) < _V1_3_SIZE:
        raise GpuMetricsError(
            f"v1.3 needs {_V1_3_SIZE} bytes, header says {size}, read {len(blob)}"
        )
    raw = {name: _field(blob, offset, fmt) for name, (offset, fmt) in _V1_3_FIELDS.items()}
    energy = raw["energy_accumulator"]
    return GpuMetrics(
        format_revision=frev,
        content_revision=crev,
        throttle_status=raw["throttle_status"],
        energy_accumulator=energy or None,  # 0: firmware that does not fill it
        system_clock_ns=raw["system_clock_counter"],
        temperature_hotspot_celsius=_scaled(raw["temperature_hotspot"], 1.0),
        average_socket_power_watts=_scaled(raw["average_socket_power"], 1.0),
        average_gfxclk_hertz=_scaled(raw["average_gfxclk_frequency"], 1e6),
    )


def revision(blob: bytes) -> tuple[int, int] | None:
    """(format, content) revision from the header, e.g. (1, 3); None for a blob
    shorter than the header."""
    if len(blob) < HEADER.size:
        return None
    _, frev, crev = HEADER.unpack_from(blob)
    return frev, crev


def format_revision(blob: bytes) -> int | None:
    """The format revision (1: dGPU layouts, 2 and 3: APU layouts) of a blob whose
    header is consistent (its structure_size is the size read), else None."""
    if len(blob) < HEADER.size:
        return None
    size, frev, _ = HEADER.unpack_from(blob)
    return frev if size == len(blob) else None


def throttle_reasons(throttle_status: int) -> frozenset[str]:
    """The reason labels whose bits are set; unknown bits count as `other`."""
    return frozenset(
        _BIT_REASON.get(bit, "other")
        for bit in range(32)
        if throttle_status >> bit & 1
    )


def _field(blob: bytes, offset: int, fmt: str) -> int | None:
    (value,) = struct.unpack_from(fmt, blob, offset)
    all_ones = (1 << (8 * struct.calcsize(fmt))) - 1
    return None if value == all_ones else value


def _scaled(value: int | None, factor: float) -> float | None:
    return None if value is None else value * factor

"""The gpu_metrics decoder against an illustrative v1.3 sample and its contrast cases
(docs/facts/amdgpu.md#contrast-samples)."""

from __future__ import annotations

import base64
import ctypes
import struct

import pytest

from exporter.daemon.sources.gpu_metrics import GpuMetricsError, decode, throttle_reasons
from exporter.sim.rig.sysfs_writer import CardSpec, gpu_metrics_v1_3

# docs/facts/amdgpu.md#contrast-samples: a Navi 31 under prefill load on its power cap.
APPENDIX_A_BLOB = base64.b64decode(
    "eAABA0IAWABWAEAAOgA+AGMAKQAAAFMBAAAAAAAAAADybxoIxj0DAMoI///hBBkAGQAZABkAygiwBOEEHQAdAB0A"
    "HQACAAEAsAYQAKAA//////////////////////////////////9wA/oDRgX//wEAAAAQAAAA"
)


def test_decodes_the_reference_sample() -> None:
    metrics = decode(APPENDIX_A_BLOB)
    assert (metrics.format_revision, metrics.content_revision) == (1, 3)
    assert metrics.throttle_status == 0x00010002
    assert metrics.temperature_hotspot_celsius == 88
    assert metrics.average_socket_power_watts == 339
    assert metrics.average_gfxclk_hertz == 2250e6
    assert metrics.energy_accumulator is None  # 0 on newer PMFW


def test_writer_produces_the_same_layout_as_the_kernel() -> None:
    # The simulator's blob, for the same card state, agrees with the sample on
    # every field this exporter reads.
    ours = decode(gpu_metrics_v1_3(CardSpec()))
    assert ours == decode(APPENDIX_A_BLOB)


@pytest.mark.parametrize(
    ("status", "reasons"),
    [
        (0x00000002, {"thermal_junction"}),                  # idle: the hotspot artefact alone
        (0x00010002, {"thermal_junction", "power"}),         # Appendix A
        (0x00000003, {"thermal_edge", "thermal_junction"}),  # A.6 real thermal throttle
        (0x00000010, {"thermal_memory"}),                    # A.6 memory thermal
        (0x00002000, {"current"}),                           # A.6 TDC_GFX
        (0x00100000, {"reliability"}),                       # FIT
        (0x00000160, {"thermal_vr"}),                        # VR_GFX, VR_MEM0, VR_SOC
        (0x80000000, {"other"}),                             # a bit SMU 13.0.0 does not define
        (0, set()),
    ],
)
def test_throttle_bits_map_to_reasons(status: int, reasons: set[str]) -> None:
    assert throttle_reasons(status) == reasons


def test_all_ones_fields_are_absent() -> None:
    blob = bytearray([0xFF] * 120)
    struct.pack_into("<HBB", blob, 0, 120, 1, 3)
    metrics = decode(bytes(blob))
    assert metrics.throttle_status is None
    assert metrics.temperature_hotspot_celsius is None
    assert metrics.energy_accumulator is None


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x78\x00", "shorter than the 4-byte header"),
        (APPENDIX_A_BLOB[:100], "read 100"),
        (struct.pack("<HBB", 120, 1, 4) + bytes(116), "revision 1.4"),
        (struct.pack("<HBB", 264, 2, 0) + bytes(260), "revision 2.0"),
    ],
)
def test_short_or_unknown_blobs_raise(blob: bytes, message: str) -> None:
    with pytest.raises(GpuMetricsError, match=message):
        decode(blob)


u16, u32, u64 = ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64


class GpuMetricsV13(ctypes.Structure):
    """`struct gpu_metrics_v1_3` field by field, as kgd_pp_interface.h declares it."""

    _fields_ = [
        ("structure_size", u16), ("format_revision", ctypes.c_uint8),
        ("content_revision", ctypes.c_uint8),
        *((f"temperature_{n}", u16) for n in ("edge", "hotspot", "mem", "vrgfx", "vrsoc",
                                              "vrmem")),
        ("average_gfx_activity", u16), ("average_umc_activity", u16),
        ("average_mm_activity", u16), ("average_socket_power", u16),
        ("energy_accumulator", u64), ("system_clock_counter", u64),
        *((f"average_{n}_frequency", u16) for n in ("gfxclk", "socclk", "uclk", "vclk0",
                                                    "dclk0", "vclk1", "dclk1")),
        *((f"current_{n}", u16) for n in ("gfxclk", "socclk", "uclk", "vclk0", "dclk0",
                                          "vclk1", "dclk1")),
        ("throttle_status", u32), ("current_fan_speed", u16), ("pcie_link_width", u16),
        ("pcie_link_speed", u16), ("padding", u16), ("gfx_activity_acc", u32),
        ("mem_activity_acc", u32), ("temperature_hbm", u16 * 4), ("firmware_timestamp", u64),
        ("voltage_soc", u16), ("voltage_gfx", u16), ("voltage_mem", u16), ("padding1", u16),
        ("indep_throttle_status", u64),
    ]


@pytest.mark.parametrize(("field", "offset"), [
    ("temperature_hotspot", 0x06), ("average_socket_power", 0x16),
    ("energy_accumulator", 0x18), ("system_clock_counter", 0x20),
    ("average_gfxclk_frequency", 0x28), ("throttle_status", 0x44),
])
def test_offsets_match_the_kernel_struct(field: str, offset: int) -> None:
    assert ctypes.sizeof(GpuMetricsV13) == 120
    assert getattr(GpuMetricsV13, field).offset == offset

"""Host families: memory and swap in bytes, PSI by kind, CPU temperature by sensor."""

from __future__ import annotations

from tests.daemon.collector.registry import answered, collected, sample_names
from tests.support.rig_readings import GIB, host


def test_memory_swap_pressure_and_temperature() -> None:
    reading = host(swap_in_bytes_total=4096.0, swap_out_bytes_total=1.5 * GIB)
    registry = collected(answered("host", reading))
    get = registry.get_sample_value
    assert get("rig_host_memory_total_bytes") == 64 * GIB
    assert get("rig_host_memory_available_bytes") == 19 * GIB
    assert get("rig_host_swap_total_bytes") == 8 * GIB
    assert get("rig_host_swap_used_bytes") == 62 * 1024**2
    assert get("rig_host_swap_in_bytes_total") == 4096.0
    assert get("rig_host_swap_out_bytes_total") == 1.5 * GIB
    assert get("rig_host_memory_pressure_stall_seconds_total", {"kind": "some"}) == 1.25
    assert get("rig_host_memory_pressure_stall_seconds_total", {"kind": "full"}) == 0.0
    assert get("rig_host_cpu_temperature_celsius", {"sensor": "Tctl"}) == 71.0


def test_a_kernel_without_psi_or_sensors_has_no_such_family() -> None:
    registry = collected(answered("host", host(pressure_stall_seconds_total={},
                                               cpu_temperatures_celsius={})))
    names = sample_names(registry)
    assert "rig_host_memory_pressure_stall_seconds_total" not in names
    assert "rig_host_cpu_temperature_celsius" not in names
    assert registry.get_sample_value("rig_host_memory_total_bytes") == 64 * GIB

"""Host and exporter alerts: swap, memory pressure, CPU temperature, failing sources."""

from __future__ import annotations

from alerts.rules.common import MEM_AVAILABLE, PER_SECOND, SWAP_IO, Alert, dur, num, pct
from exporter.schema import OTHER_SOURCES_UP
from exporter.thresholds import MIB, Thresholds


def mib(value: float) -> str:
    return num(value / MIB)


def kib(value: float) -> str:
    return num(value / 1024)


def host_alerts(t: Thresholds) -> list[Alert]:
    oom = "What holds the RAM (the L2 pool pins ~40 GB): free -h, then dmesg for the OOM killer."
    return [
        Alert(
            "RigHostSwapping",
            "warning",
            f"""
{SWAP_IO} >= {num(t.host_swap_io_bytes_per_second)}
or
deriv(rig_host_swap_used_bytes[{dur(t.host_swap_growth_window_seconds)}])
>= {num(t.host_swap_growth_bytes_per_second)}
""",
            t.host_swapping_for_seconds,
            f"The host has moved {mib(t.host_swap_io_bytes_per_second)} MiB/s or more to or from"
            f" swap, or its swap use grew {kib(t.host_swap_growth_bytes_per_second)} KiB/s or"
            f" more, for {dur(t.host_swapping_for_seconds)}.",
            "Host {{ $labels.instance }} moves {{ $value | humanize1024 }}B/s to or from swap,"
            " or its swap use grows at that rate.",
            "Which process holds the memory: smem -rs swap, and the L2 pool size (--hicache-size).",
            value_kind=PER_SECOND,
        ),
        Alert(
            "RigHostMemoryPressure",
            "critical",
            f"{MEM_AVAILABLE} < {num(t.host_memory_available_ratio)}",
            t.host_memory_for_seconds,
            f"Available RAM has stayed below {pct(t.host_memory_available_ratio)} for"
            f" {dur(t.host_memory_for_seconds)}.",
            "Host {{ $labels.instance }} has only {{ $value | humanizePercentage }} of its RAM"
            f" available (alert below {pct(t.host_memory_available_ratio)}).",
            oom,
            signal="available",
        ),
        Alert(
            "RigHostMemoryPressure",
            "critical",
            'rate(rig_host_memory_pressure_stall_seconds_total{kind="full"}'
            f"[{dur(t.rate_window_seconds)}])"
            f" >= {num(t.host_memory_full_stall_ratio)}",
            t.host_memory_for_seconds,
            f"All tasks have stalled on memory {pct(t.host_memory_full_stall_ratio)} of the time"
            f" or more (PSI full) for {dur(t.host_memory_for_seconds)}.",
            "All tasks on host {{ $labels.instance }} stalled on memory"
            " {{ $value | humanizePercentage }} of the time (PSI full; alert at "
            + pct(t.host_memory_full_stall_ratio) + ").",
            oom,
            signal="stall",
        ),
        Alert(
            "RigCpuHot",
            "warning",
            f"rig_host_cpu_temperature_celsius >= {num(t.cpu_temperature_celsius)}",
            t.cpu_hot_for_seconds,
            f"A CPU sensor has read {num(t.cpu_temperature_celsius)} °C or more for"
            f" {dur(t.cpu_hot_for_seconds)}.",
            "CPU sensor {{ $labels.sensor }} on {{ $labels.instance }} reads {{ $value }} °C"
            f" (alert at {num(t.cpu_temperature_celsius)} °C).",
            "The CPU cooler and the GPUs' exhaust: sensors k10temp-*.",
        ),
        Alert(
            "RigExporterSourceDown",
            "warning",
            # Engine sources have RigEngineDown.
            f"""
{OTHER_SOURCES_UP} == 0
""",
            t.source_down_for_seconds,
            f"An exporter source has failed every read for {dur(t.source_down_for_seconds)}.",
            "The exporter on {{ $labels.instance }} cannot read its {{ $labels.source }} source.",
            "The exporter's log: one line names the failing source and why.",
        ),
    ]

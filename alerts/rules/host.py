"""Host and exporter alerts: swap, memory pressure, CPU temperature, failing sources."""

from __future__ import annotations

from alerts.rules.common import MEM_AVAILABLE, SWAP_IO, Alert, dur, num
from exporter.thresholds import Thresholds


def host_alerts(t: Thresholds) -> list[Alert]:
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
            "The host is swapping.",
            "Host {{ $labels.instance }} moves {{ $value | humanize1024 }}B/s to or from swap,"
            " or its swap use grows at that rate.",
        ),
        Alert(
            "RigHostMemoryPressure",
            "critical",
            f"{MEM_AVAILABLE} < {num(t.host_memory_available_ratio)}",
            t.host_memory_for_seconds,
            "The host is running out of memory.",
            "Host {{ $labels.instance }} has only {{ $value | humanizePercentage }} of its RAM"
            " available.",
            signal="available",
        ),
        Alert(
            "RigHostMemoryPressure",
            "critical",
            'rate(rig_host_memory_pressure_stall_seconds_total{kind="full"}'
            f"[{dur(t.rate_window_seconds)}])"
            f" >= {num(t.host_memory_full_stall_ratio)}",
            t.host_memory_for_seconds,
            "The host is running out of memory.",
            "All tasks on host {{ $labels.instance }} stalled on memory"
            " {{ $value | humanizePercentage }} of the time (PSI full).",
            signal="stall",
        ),
        Alert(
            "RigCpuHot",
            "warning",
            f"rig_host_cpu_temperature_celsius >= {num(t.cpu_temperature_celsius)}",
            t.cpu_hot_for_seconds,
            "The CPU runs near its temperature limit.",
            "CPU sensor {{ $labels.sensor }} on {{ $labels.instance }} reads {{ $value }} °C.",
        ),
        Alert(
            "RigExporterSourceDown",
            "warning",
            # Engine sources have RigEngineDown; probe sources get a `name`
            # so that RigEngineDown can inhibit them.
            """
label_replace(rig_source_up{source!~"engine/.+"}, "name", "$1", "source", "probe/(.+)") == 0
""",
            t.source_down_for_seconds,
            "An exporter source is failing.",
            "The exporter on {{ $labels.instance }} cannot read its {{ $labels.source }} source.",
        ),
    ]

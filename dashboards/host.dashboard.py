"""Host: RAM, swap, memory pressure, CPU temperature, the exporter's sources (docs/dashboards.md).

The HiCache L2 pool lives in host RAM (docs/facts/rig.md#kv-capacity: `--hicache-size 20` pins about
40 GB of the 64 GB), so host memory is part of the cache's story.
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from alerts.rules.common import MEM_AVAILABLE, SWAP_IO
from dashboards.panels import (
    UIDS,
    Section,
    falling_steps,
    on_off,
    over_interval,
    rate,
    rig_dashboard,
    sel,
    state_timeline,
    steps,
    targets,
    threshold_override,
    timeseries,
)
from exporter.thresholds import Thresholds


def build(t: Thresholds) -> Dashboard:
    memory = Section("Memory", [
        timeseries(
            "RAM available",
            "RAM available to new allocations without swapping (MemAvailable) against the"
            " total (dashed).",
            "bytes",
            targets(
                (sel("rig_host_memory_available_bytes"), "{{instance}} available"),
                (sel("rig_host_memory_total_bytes"), "{{instance}} total"),
            ),
            overrides=[threshold_override(".* total$")],
            min_value=0, w=8,
        ),
        timeseries(
            "RAM available share",
            "Available RAM over total. Dashed line:"
            f" {t.host_memory_available_ratio:.0%}, below which the host is out of memory.",
            "percentunit",
            targets((over_interval("min", sel(MEM_AVAILABLE)), "{{instance}}")),
            thresholds=falling_steps(("red", t.host_memory_available_ratio)),
            alerts=("RigHostMemoryPressure",),
            min_value=0, max_value=1, w=8,
        ),
        timeseries(
            "Memory pressure (PSI)",
            "The share of time some task (some) or every task (full) stalled waiting for"
            " memory, from /proc/pressure/memory. Dashed line:"
            f" {t.host_memory_full_stall_ratio:.0%}, on full stall only (some is drawn for"
            " context; no rule judges it).",
            "percentunit",
            targets(
                (rate("rig_host_memory_pressure_stall_seconds_total", 'kind="full"'),
                 "{{instance}} full"),
                (rate("rig_host_memory_pressure_stall_seconds_total", 'kind="some"'),
                 "{{instance}} some"),
            ),
            thresholds=steps(("red", t.host_memory_full_stall_ratio)),
            alerts=("RigHostMemoryPressure",),
            min_value=0, w=8,
        ),
    ])
    swap = Section("Swap", [
        timeseries(
            "Swap used",
            "Swap in use against the swap size (dashed). Steady growth is a slow leak into"
            f" swap: {t.host_swap_growth_bytes_per_second / 1024:g} KiB/s sustained over"
            f" {t.host_swap_growth_window_seconds // 60} min counts as swapping.",
            "bytes",
            targets(
                (sel("rig_host_swap_used_bytes"), "{{instance}} used"),
                (sel("rig_host_swap_total_bytes"), "{{instance}} total"),
            ),
            overrides=[threshold_override(".* total$")],
            alerts=("RigHostSwapping",),
            min_value=0,
        ),
        timeseries(
            "Swap in and out",
            "Bytes per second read from and written to swap, and their 5 min sum the alert"
            f" uses. Dashed line: {t.host_swap_io_bytes_per_second / 1024 / 1024:g} MiB/s.",
            "Bps",
            targets(
                (rate("rig_host_swap_in_bytes_total"), "{{instance}} in"),
                (rate("rig_host_swap_out_bytes_total"), "{{instance}} out"),
                (sel(SWAP_IO), "{{instance}} in + out (5m)"),
            ),
            thresholds=steps(("orange", t.host_swap_io_bytes_per_second)), judged=("C",),
            alerts=("RigHostSwapping",),
            min_value=0,
        ),
    ])
    cpu = Section("CPU and exporter", [
        timeseries(
            "CPU temperature",
            "CPU temperature sensors (k10temp Tctl on Ryzen). Dashed line:"
            f" {t.cpu_temperature_celsius:g} °C.",
            "celsius",
            targets((over_interval("max", sel("rig_host_cpu_temperature_celsius")),
                     "{{instance}} {{sensor}}")),
            thresholds=steps(("orange", t.cpu_temperature_celsius)),
            alerts=("RigCpuHot",),
        ),
        state_timeline(
            "Exporter sources",
            "Whether each of the exporter's sources (gpu, host, engine/<name>,"
            " probe/<name>) answered its last scrape. One failing source never blanks the"
            " others.",
            targets((sel("rig_source_up"), "{{instance}} {{source}}")),
            mappings=on_off("down", "up", on_color="green", off_color="red"),
            alerts=("RigExporterSourceDown", "RigEngineDown"),
            w=12,
        ),
        timeseries(
            "Source read time",
            "How long each source took in the last scrape; each has a deadline below"
            " Prometheus' scrape timeout.",
            "s",
            targets((sel("rig_source_scrape_duration_seconds"), "{{instance}} {{source}}")),
            w=24,
        ),
    ])
    return rig_dashboard(
        "Rig: host",
        UIDS["host"],
        "Host RAM, swap and swap rate, memory pressure, CPU temperature, and the"
        " exporter's own sources.",
        [memory, swap, cpu],
    )


dashboard = build(Thresholds())

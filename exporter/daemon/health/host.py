"""Host and exporter checks, mirroring alerts/rules/host.py: swap, memory, CPU
temperature, and the exporter's own non-engine sources."""

from __future__ import annotations

from collections.abc import Callable

from exporter.daemon.health.report import Signal, Stage
from exporter.daemon.health.view import Context, mib, percent, seconds, signal
from exporter.daemon.sources.host import CPU_SENSOR_CHIPS
from exporter.schema import ENGINE_SOURCE_PREFIX


def host_signals(c: Context) -> list[Signal]:
    host = c.view.host
    if host is None:
        return []  # the host source is down or off: exporter_source says which
    t = c.t
    out: list[Signal] = []

    # RigHostSwapping: swap traffic over the rate window, or swap use growing.
    swapping = (Stage("warning", t.host_swapping_for_seconds),)
    window = t.rate_window_seconds
    holds, io, reason = _over(
        c, window, lambda: c.history.rate(("host", "swap_io_bytes_total"), c.now, window),
        t.host_swap_io_bytes_per_second,
        lambda io: f"{mib(io)}/s to and from swap over the last {seconds(window)}",
        "swap traffic")
    out.append(signal("host_swap", {}, "RigHostSwapping", swapping, holds, io,
                      t.host_swap_io_bytes_per_second, "bytes/s", reason, "io"))
    growth_window = t.host_swap_growth_window_seconds
    holds, growth, reason = _over(
        c, growth_window,
        lambda: c.history.deriv(("host", "swap_used_bytes"), c.now, growth_window),
        t.host_swap_growth_bytes_per_second,
        lambda growth: f"swap use {mib(host.swap_used_bytes)}, growing "
                       f"{growth / 1024:.1f} KiB/s over {seconds(growth_window)}",
        f"swap use {mib(host.swap_used_bytes)}; growth")
    out.append(signal("host_swap", {}, "RigHostSwapping", swapping, holds, growth,
                      t.host_swap_growth_bytes_per_second, "bytes/s", reason, "growth"))

    # RigHostMemoryPressure: little RAM available, or tasks stalled on memory (PSI full).
    pressure = (Stage("critical", t.host_memory_for_seconds),)
    if host.memory_total_bytes > 0:
        available = host.memory_available_bytes / host.memory_total_bytes
        out.append(signal("host_memory", {}, "RigHostMemoryPressure", pressure,
                          available < t.host_memory_available_ratio, available,
                          t.host_memory_available_ratio, "ratio",
                          f"{percent(available)} of RAM available "
                          f"({host.memory_available_bytes / 2**30:.1f} GiB)", "available"))
    if "full" in host.pressure_stall_seconds_total:
        holds, stalled, reason = _over(
            c, window,
            lambda: c.history.rate(("host", "pressure_full_seconds_total"), c.now, window),
            t.host_memory_full_stall_ratio,
            lambda stalled: f"all tasks stalled on memory {percent(stalled)} of the time "
                            "(PSI full)",
            "memory stalls (PSI full)")
        out.append(signal("host_memory", {}, "RigHostMemoryPressure", pressure, holds, stalled,
                          t.host_memory_full_stall_ratio, "ratio", reason, "stall"))

    # RigCpuHot
    cpu_hot = (Stage("warning", t.cpu_hot_for_seconds),)
    if host.cpu_temperatures_celsius:
        sensor, hottest = max(host.cpu_temperatures_celsius.items(), key=lambda kv: kv[1])
        out.append(signal("cpu_temperature", {}, "RigCpuHot", cpu_hot,
                          hottest >= t.cpu_temperature_celsius, hottest,
                          t.cpu_temperature_celsius, "celsius", f"CPU {sensor} {hottest:.0f} °C"))
    else:
        out.append(signal("cpu_temperature", {}, "RigCpuHot", cpu_hot, None, None,
                          t.cpu_temperature_celsius, "celsius",
                          f"no CPU temperature sensor ({', '.join(CPU_SENSOR_CHIPS)})"))
    return out


def source_signals(c: Context) -> list[Signal]:
    """RigExporterSourceDown: the sources other than engines (those have engine_up).

    One line for those that answer, and one per source that does not."""
    stages = (Stage("warning", c.t.source_down_for_seconds),)
    results = [r for name, r in c.view.results.items() if not name.startswith(ENGINE_SOURCE_PREFIX)]
    out = [signal("exporter_source", {"source": r.name}, "RigExporterSourceDown", stages, True,
                  0.0, None, "bool", f"cannot read {r.name}: {r.error}")
           for r in results if not r.up]
    answered = [r for r in results if r.up]
    if answered:
        out.append(signal("exporter_source", {}, "RigExporterSourceDown", stages, False,
                          float(len(answered)), None, "sources",
                          ", ".join(f"{r.name} read in {r.duration_seconds * 1000:.0f} ms"
                                    for r in answered)))
    return out


def _over(c: Context, window: float, measure: Callable[[], float | None], threshold: float,
          says: Callable[[float], str], what: str) -> tuple[bool | None, float | None, str]:
    """(holds, value, reason) for `measure() >= threshold` over `window`: unknown until
    the history covers the window."""
    if not c.filled(window):
        return None, None, f"{what}: {c.not_filled(window)}"
    value = measure() or 0.0
    return value >= threshold, value, says(value)

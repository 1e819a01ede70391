"""Host families from a HostReading.

    rig_host_memory_total_bytes 6.7e+10
    rig_host_memory_available_bytes 2.04e+10
    rig_host_swap_in_bytes_total 0.0
    rig_host_memory_pressure_stall_seconds_total{kind="some"} 12.5
    rig_host_cpu_temperature_celsius{sensor="Tctl"} 61.2
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric

from exporter.daemon.collector.families import counter, families, gauge, non_empty
from exporter.daemon.sources.host import HostReading

_GAUGES = (
    ("memory_total_bytes", "Physical RAM.", "memory_total_bytes"),
    ("memory_available_bytes", "RAM available without swapping (MemAvailable).",
     "memory_available_bytes"),
    ("swap_total_bytes", "Swap space.", "swap_total_bytes"),
    ("swap_used_bytes", "Swap space in use.", "swap_used_bytes"),
)
_COUNTERS = (
    ("swap_in_bytes_total", "Bytes swapped in from disk since boot.", "swap_in_bytes_total"),
    ("swap_out_bytes_total", "Bytes swapped out to disk since boot.", "swap_out_bytes_total"),
)


@families.register
def _(reading: HostReading) -> Iterable[Metric]:
    for name, doc, attribute in _GAUGES:
        family = gauge(f"host_{name}", doc)
        family.add_metric([], getattr(reading, attribute))
        yield family
    for name, doc, attribute in _COUNTERS:
        family = counter(f"host_{name}", doc)
        if getattr(reading, attribute) is not None:
            family.add_metric([], getattr(reading, attribute))
            yield family
    pressure = counter("host_memory_pressure_stall_seconds_total",
                       "Time tasks stalled on memory (PSI): some = at least one, "
                       "full = all non-idle tasks.", ["kind"])
    for kind, seconds in sorted(reading.pressure_stall_seconds_total.items()):
        pressure.add_metric([kind], seconds)
    cpu = gauge("host_cpu_temperature_celsius", "CPU temperature (k10temp Tctl on Ryzen).",
                ["sensor"])
    for sensor, celsius in sorted(reading.cpu_temperatures_celsius.items()):
        cpu.add_metric([sensor], celsius)
    yield from non_empty(pressure, cpu)

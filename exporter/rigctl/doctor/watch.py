"""The exporter's /metrics as the doctor reads it: a few scrapes over one watch.

Each scrape is one GET of the exporter's /metrics, so it costs each engine what a
Prometheus scrape costs (one /metrics render, or none when the stall tracker
fetched one in the last second). The doctor takes three: at the start, halfway
and at the end of the watch; counters are compared between the first and last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from exporter.daemon.engines.exposition import Sample, parse
from exporter.rigctl.client.http import Access, BadAnswer, read_text
from exporter.schema import ENGINE_SOURCE_PREFIX

#: The families the checks read, by the name on their TYPE line.
FAMILIES = frozenset({
    "rig_source_up", "rig_build_info",
    "rig_engine_info", "rig_engine_decode_stall_plan_info", "rig_engine_decode_stall_tracker_up",
    "rig_engine_decode_stall_seconds", "rig_engine_decode_stall_max_seconds",
    "rig_engine_decode_stall_resolution_seconds", "rig_engine_decode_batches_total",
    "rig_engine_inter_token_latency_seconds", "rig_engine_time_to_first_token_seconds",
    "rig_engine_running_requests", "rig_engine_scheduler_cpu_seconds_total",
    "rig_engine_scheduler_idle_seconds_total", "rig_engine_scheduler_stage_seconds_total",
    "rig_stream_requests_total", "rig_stream_active", "rig_stream_generated_tokens_total",
    "rig_stream_frames_total", "rig_stream_ttft_seconds",
    "rig_probe_success",
    "rig_gpu_present", "rig_gpu_info", "rig_gpu_expected_cards", "rig_gpu_energy_joules_total",
    "rig_gpu_power_watts", "rig_gpu_temperature_limit_celsius",
    "rig_host_memory_pressure_stall_seconds_total", "rig_host_swap_total_bytes",
    "rig_host_swap_used_bytes", "rig_host_swap_in_bytes_total", "rig_host_swap_out_bytes_total",
})


@dataclass(frozen=True)
class Scrape:
    #: time.monotonic() when the request was sent. The exporter reads its sources
    #: as a scrape arrives (or shares a read under way), so this is when the cards
    #: were read; the answer may come seconds later, after a slow engine's.
    at: float
    samples: dict[str, list[Sample]]

    def all(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples.get(name, ())
                if all(s.labels.get(k) == v for k, v in labels.items())]

    def total(self, name: str, **labels: str) -> float | None:
        """The sum of the matching samples; None when there is none."""
        found = self.all(name, **labels)
        return sum(s.value for s in found) if found else None

    def has(self, name: str, **labels: str) -> bool:
        return bool(self.all(name, **labels))


async def scrape(exporter: str, timeout: float, access: Access) -> Scrape:
    """One GET of the exporter's /metrics; Unreachable (or BadAnswer) when it fails."""
    url = exporter + "/metrics"
    sent = time.monotonic()
    text = await read_text(url, timeout, access)
    exposition = parse(text, FAMILIES)
    if exposition.type_lines == 0:
        raise BadAnswer(f"{url}: not a Prometheus exposition: {text[:60]!r}")
    if "rig_source_up" not in exposition.families:
        raise BadAnswer(f"{url}: no rig_source_up: not a rig exporter")
    samples: dict[str, list[Sample]] = {}
    for family in exposition.families.values():
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return Scrape(sent, samples)


@dataclass(frozen=True)
class Watch:
    """The scrapes of one watch, oldest first (two at least)."""

    scrapes: tuple[Scrape, ...]

    @property
    def first(self) -> Scrape:
        return self.scrapes[0]

    @property
    def last(self) -> Scrape:
        return self.scrapes[-1]

    @property
    def seconds(self) -> float:
        return self.last.at - self.first.at

    def delta(self, name: str, **labels: str) -> float | None:
        """How much a counter moved from the first scrape to the last; None when it is
        absent from either (a counter created meanwhile moved from 0)."""
        before, after = self.first.total(name, **labels), self.last.total(name, **labels)
        if after is None:
            return None
        return after - (before or 0.0)

    def peak(self, name: str, **labels: str) -> float | None:
        """The largest total any scrape saw (a gauge such as running requests)."""
        values = [v for s in self.scrapes if (v := s.total(name, **labels)) is not None]
        return max(values) if values else None

    def engines(self) -> list[str]:
        """Engine names, from the exporter's engine sources (rig_source_up)."""
        return sorted(s.labels["source"].removeprefix(ENGINE_SOURCE_PREFIX)
                      for s in self.last.all("rig_source_up")
                      if s.labels.get("source", "").startswith(ENGINE_SOURCE_PREFIX))

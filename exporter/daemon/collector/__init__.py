"""Turn one scrape's Snapshot into metric families (client_python's custom-collector pattern).

A fresh RigCollector is registered in a fresh registry for each scrape, so no
label value outlives the reading that produced it. Each reading type has its
own module that registers a `families` implementation for it.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporter.daemon.collector import engine, gpu, host, tap  # noqa: F401  (registers their readings)
from exporter.daemon.collector.families import families
from exporter.daemon.collector.rig import rig_families
from exporter.daemon.snapshot import Snapshot


class RigCollector(Collector):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        # Source health first, so a failed source shows up instead of vanishing.
        yield from rig_families(self.snapshot)
        # Two engines (or probes) each build rig_engine_* families: merge them by
        # name, since Prometheus rejects a scrape that names a family twice.
        merged: dict[str, Metric] = {}
        for reading in self.snapshot.readings():
            for family in families(reading):
                if family.name in merged:
                    merged[family.name].samples.extend(family.samples)
                else:
                    merged[family.name] = family
        yield from merged.values()
